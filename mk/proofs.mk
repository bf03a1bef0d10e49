# Proofs (docs/proofs.md): the incident replays, the chaos run, the fuzz
# targets of the decoders. Included by the Makefile; `make test` runs all of
# them too (the chaos run with 30 seeds, the fuzz targets on their seed
# corpora).
#
#   make chaos SEEDS=500       500 seeds (default 100); the report is printed
#                              and kept in .sluice/chaos-report.txt; the seeds
#                              are spread over CHAOS_EMULATORS (2) emulators
#   make chaos SEED=17         replay one seed (what a failing seed prints)
#   make races                 the incident replays and the bug replays
#   make fuzz-proofs           each decoder's fuzz target for FUZZTIME (30s)

.PHONY: chaos races fuzz-proofs flake-hunt

SEEDS ?= 100
SEED ?=
FIRST_SEED ?= 1
# Four at a time on two cores: at six, a seed that settles in under two
# minutes alone (58) ran past its 12-minute settle limit (2026-12-03).
CHAOS_PARALLEL ?= 4
CHAOS_EMULATORS ?= 2
CHAOS_REPORT ?= .sluice/chaos-report.txt
FUZZTIME ?= 30s

# with-emulator runs $(1) with the emulator up, starting it (and stopping it
# afterwards) only when none answers, as scripts/test.sh does.
define with-emulator
	@started=0; \
	if ! bash localstack/start.sh --check >/dev/null 2>&1; then started=1; bash localstack/start.sh || exit 1; fi; \
	$(1); status=$$?; \
	if [ $$started = 1 ]; then bash localstack/stop.sh || true; fi; \
	exit $$status
endef

## chaos: the seeded fault-injection run, SEEDS seeds from FIRST_SEED (or only SEED), CHAOS_PARALLEL at once over CHAOS_EMULATORS emulators
chaos:
	CHAOS_SEEDS=$(SEEDS) CHAOS_FIRST=$(FIRST_SEED) CHAOS_SEED=$(if $(SEED),$(SEED),-1) CHAOS_PARALLEL=$(CHAOS_PARALLEL) \
	  CHAOS_EMULATORS=$(CHAOS_EMULATORS) CHAOS_REPORT=$(CHAOS_REPORT) bash scripts/chaos.sh

## races: the step-by-step replays of the three incidents, their variants and the bugs found
races:
	$(call with-emulator,SLUICE_REQUIRE_EMULATOR=1 $(GO) test ./tests/races -count=1 -timeout 30m)

## fuzz-proofs: fuzz the meta.json parser, the SQS message decoder and the S3 event decoder for FUZZTIME each
fuzz-proofs:
	$(GO) test ./shared/blockmeta/ -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./shared/messages/ -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./shared/s3event/ -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)

## flake-hunt: FLAKE_RUNS runs (20) of FLAKE_PKGS (the integration packages) with both cores loaded; prints each test's failures
flake-hunt:
	bash scripts/flake-hunt.sh

# The explorer (tests/explore, docs/proofs.md "Exploring every schedule"):
# make test explores every order of deliveries; these widen the scope.
#
#   make explore                        crashes, interleavings, the late block and a
#                                       re-upload, for EXPLORE_BUDGET (10m)
#   make explore EXPLORE_FLAGS='-explore.crashes=1'    a scope of your own
#   make explore-mutants                each mutant (a condition removed) for EXPLORE_BUDGET
.PHONY: explore explore-mutants
EXPLORE_BUDGET ?= 10m
EXPLORE_FLAGS ?= -explore.crashes=1 -explore.preemptions=2 -explore.late -explore.reupload

## explore: the schedule explorer on a wider scope than make test's (EXPLORE_FLAGS), for EXPLORE_BUDGET
explore:
	$(GO) test -short -count=1 -timeout 0 -v -run '^TestExplore$$' ./tests/explore $(EXPLORE_FLAGS) -explore.budget=$(EXPLORE_BUDGET) 2>&1 | grep -v 'logwriter.go'

## explore-mutants: the explorer on each protocol mutant, for EXPLORE_BUDGET each
explore-mutants:
	$(GO) test -short -count=1 -timeout 0 -v -run '^TestExploreMutants$$' ./tests/explore -explore.budget=$(EXPLORE_BUDGET) 2>&1 | grep -v 'logwriter.go'

## thanos-check: Thanos' own verifier over a Thanos-layout deployment (THANOS=binary or THANOS_SRC=checkout; docs/thanos.md)
.PHONY: thanos-check
thanos-check:
	bash scripts/thanos-check.sh

## cortex-check: Cortex's own bucket-index reader and updater over Sluice's index (CORTEX_SRC=checkout; docs/protocol.md)
.PHONY: cortex-check
cortex-check:
	bash scripts/cortex-check.sh

## mutants: remove one guard at a time (tests/mutants/mutations.go) and print which fast-tier tests kill each: the kill table of docs/proofs.md
.PHONY: mutants
MUTANTS_FLAGS ?=
mutants:
	$(GO) run ./tests/mutants $(MUTANTS_FLAGS)
