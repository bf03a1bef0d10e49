#!/usr/bin/env bash
# make test: unit tests, then integration tests against the local AWS
# platform, which this script starts (localstack/start.sh installs what is
# missing) and stops again on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."
export SLUICE_EMULATOR_PORT="${SLUICE_EMULATOR_PORT:-4566}"
export AWS_ENDPOINT_URL="${AWS_ENDPOINT_URL:-http://127.0.0.1:$SLUICE_EMULATOR_PORT}"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
GOTEST_FLAGS=${GOTEST_FLAGS:-}

echo "== unit tests (no emulator)"
go test -short -count=1 $GOTEST_FLAGS ./...

started_here=0
if ! bash localstack/start.sh --check >/dev/null 2>&1; then
  started_here=1
fi
cleanup() { if [ "$started_here" = 1 ]; then bash localstack/stop.sh || true; fi; }
trap cleanup EXIT
bash localstack/start.sh

echo "== integration tests (emulator at $AWS_ENDPOINT_URL)"
# This includes the chaos run's first 30 seeds (tests/chaos; more with
# `make chaos SEEDS=n`).
SLUICE_REQUIRE_EMULATOR=1 go test -count=1 -timeout 30m $GOTEST_FLAGS ./...

if [ -f infra/go.mod ]; then
  echo "== infra: CDK template tests and synth"
  make --no-print-directory synth-test
fi
echo "== make test: all passed"
