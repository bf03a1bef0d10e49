# infra: the CDK v2 app in infra/ (docs/deploy.md).
#
#   make synth        build the functions, then `cdk synth` offline into infra/cdk.out
#   make synth-test   infra's Go tests (template assertions), then make synth
#   make infra-cli    install the pinned CDK CLI from infra/package-lock.json
#
# Synthesis needs no AWS credentials: the stack is environment-agnostic.
# Pass CDK context with CDK_CONTEXT, e.g.
#   make synth CDK_CONTEXT="-c bucket=my-bucket -c prefix=prometheus/"

.PHONY: synth synth-test infra-test infra-cli

INFRA_DIR := infra
INFRA_CDK := $(INFRA_DIR)/node_modules/.bin/cdk
CDK_CONTEXT ?=
# Offline and quiet: no EOL warning for Node 20, no telemetry, no version
# check, no notices (which are fetched from the network).
INFRA_CDK_ENV := NODE_NO_WARNINGS=1 JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_DISABLE_CLI_TELEMETRY=true CDK_DISABLE_VERSION_CHECK=true

## infra-cli: the CDK CLI pinned by infra/package-lock.json (npm ci when missing or stale)
infra-cli: $(INFRA_DIR)/node_modules/.package-lock.json

$(INFRA_DIR)/node_modules/.package-lock.json: $(INFRA_DIR)/package.json $(INFRA_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  echo "infra: npm not found; installing Debian's nodejs and npm"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix $(INFRA_DIR) --no-audit --no-fund --loglevel=error
	@touch $@

## infra-test: the CDK template tests (no AWS, no emulator)
infra-test:
	cd $(INFRA_DIR) && $(INFRA_CDK_ENV) $(GO) test -count=1 ./...

## synth: build the functions, then synthesize the stack offline into infra/cdk.out;
## a finding of CDK's CloudFormation validation (what CloudFormation or IAM would refuse) fails it
synth: build infra-cli
	cd $(INFRA_DIR) && set -o pipefail && $(INFRA_CDK_ENV) ./node_modules/.bin/cdk synth --no-notices --quiet --output cdk.out $(CDK_CONTEXT) 2>&1 | tee cdk.out.log
	@if grep -q "(CloudFormation Validate)" $(INFRA_DIR)/cdk.out.log; then echo "synth: CloudFormation validation found problems (above)" >&2; exit 1; fi
	@echo "synth: $(INFRA_DIR)/cdk.out/$$(cd $(INFRA_DIR)/cdk.out && ls *.template.json | tr '\n' ' ')"

## synth-test: what `make test` runs last: the template tests, then the offline synth
synth-test: infra-test synth
