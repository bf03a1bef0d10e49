# Local AWS platform (localstack/, docs/platform.md): the emulator, the
# provisioner, the event-source runner, S3 event decoding and block keys.
# make up / make down (in the Makefile) start and stop the emulator.

.PHONY: provision reset test-platform fuzz-platform

PREFIX ?= sluice-local
FUZZTIME ?= 30s
PLATFORM_PKGS := ./localstack/... ./shared/eventsource/... ./shared/s3event/... ./shared/blockkey/...

## provision: create (or converge) a deployment named PREFIX in the emulator; prints its environment: eval "$$(make -s provision)"
provision:
	@$(GO) run ./localstack/cmd/sluice-local provision --name $(PREFIX) --exports

## reset: forget every bucket, table and queue in the running emulator
reset:
	bash localstack/start.sh --reset

## test-platform: the platform's own tests (unit, then integration against the emulator that make up started)
test-platform:
	$(GO) test -short -count=1 $(PLATFORM_PKGS)
	SLUICE_REQUIRE_EMULATOR=1 $(GO) test -count=1 $(PLATFORM_PKGS)

## fuzz-platform: fuzz s3event.Decode and blockkey.Parse for FUZZTIME each
fuzz-platform:
	$(GO) test ./shared/s3event/ -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	$(GO) test ./shared/blockkey/ -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)
