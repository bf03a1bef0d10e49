# Sluice — build, test and run locally. Every target is documented in README.md.
# Fragments in mk/ each belong to one part of the project.

SHELL := /bin/bash
GO ?= go
FUNCTIONS := planner compact cleaner uploader
export AWS_ENDPOINT_URL ?= http://127.0.0.1:4566
export AWS_REGION ?= us-east-1
export AWS_ACCESS_KEY_ID ?= test
export AWS_SECRET_ACCESS_KEY ?= test

.PHONY: all build test test-unit test-integration demo up down lint bench synth chaos clean

all: build

## build: every Lambda as dist/<fn>/bootstrap (linux/arm64) plus host binaries in bin/
build:
	@for fn in $(FUNCTIONS); do \
	  echo "build dist/$$fn/bootstrap (linux/arm64)"; \
	  GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -o dist/$$fn/bootstrap ./functions/$$fn || exit 1; \
	done
	@mkdir -p bin && CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/... ./localstack/cmd/...
	@echo "host binaries: $$(ls bin | tr '\n' ' ')"

## test: unit tests, then integration tests against the emulator (started and stopped here)
test:
	bash scripts/test.sh

## up / down: start and stop the local AWS platform on 127.0.0.1:4566
up:
	bash localstack/start.sh

down:
	bash localstack/stop.sh

## lint: gofmt, go vet, staticcheck
lint:
	bash scripts/lint.sh

clean:
	rm -rf dist bin

include $(wildcard mk/*.mk)
