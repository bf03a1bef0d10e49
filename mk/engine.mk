# Block engine (shared/blockmeta, compaction, blockgen, equiv, blockstore):
# benchmarks and the promtool readability check. Included by the Makefile.

.PHONY: bench bench-scale promtool-check test-engine thanos-downsample-check

ENGINE_PKGS := ./shared/blockmeta/... ./shared/compaction/... ./shared/blockgen/... ./shared/equiv/... ./shared/blockstore/... ./shared/downsample/...

## bench: plain Prometheus compaction vs partitioned compaction (N=1,4,8) on one shared input; prints a table
bench:
	$(GO) test ./tests/bench/ -run '^$$' -bench . -benchtime 1x -count 1 -timeout 60m

## bench-scale: issue 11's measurement (not in make test): a group of 12 × 2h blocks of 500k series through the emulator, N = 8, direct and split, each job a process of its own, beside plain LeveledCompactor; SLUICE_SCALE_SERIES=20000 for a quick run
bench-scale:
	bash scripts/bench-scale.sh

## promtool-check: promtool tsdb analyze on every block the engine writes
promtool-check:
	bash scripts/promtool-check.sh

## thanos-downsample-check: Sluice's 5m and 1h downsamples against Thanos' own downsample.Downsample, chunk for chunk, with throughput side by side (builds tools/thanoscheck, a module of its own; UPDATE_GOLDEN=1 rewrites shared/downsample's golden file)
thanos-downsample-check:
	bash scripts/thanos-downsample-check.sh

## test-engine: unit tests of the block engine packages only
test-engine:
	$(GO) test -short $(ENGINE_PKGS) ./tests/bench/...
