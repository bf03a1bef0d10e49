# make demo: the first five minutes (scripts/demo.sh, localstack/demo).

## demo: start the local platform, compact two tenants' blocks race-free, verify; leaves it running (make down stops it)
## DEMO_FLAGS passes flags to `sluice-local demo`, e.g. make demo DEMO_FLAGS="--seed 42 --series 500"
demo:
	bash scripts/demo.sh $(DEMO_FLAGS)
