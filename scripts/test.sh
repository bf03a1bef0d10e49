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

# The status page is tested in a real headless browser (tests/ui): Chromium
# from Debian's packages, installed here when missing, and the test is told
# to fail rather than skip without it.
if [ -z "${SLUICE_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "== installing Chromium from Debian's packages (the status page's browser test)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
export SLUICE_REQUIRE_BROWSER=1

echo "== unit tests and the in-memory tier (no emulator)"
go test -short -count=1 $GOTEST_FLAGS ./...

# The chaos run (tests/chaos, its first 20 seeds — the smallest run held to
# inject every fault kind and make every check; more with `make chaos
# SEEDS=n`) gets an emulator of its own on the next port and runs beside
# the other integration tests: each moto is one Python process bound by
# its interpreter lock, so two of them use both cores.
chaos_port=$((SLUICE_EMULATOR_PORT + 1))
chaos_endpoint="http://127.0.0.1:$chaos_port"
started=()
cleanup() {
  for port in "${started[@]}"; do SLUICE_EMULATOR_PORT=$port bash localstack/stop.sh || true; done
}
trap cleanup EXIT
for port in "$SLUICE_EMULATOR_PORT" "$chaos_port"; do
  if ! SLUICE_EMULATOR_PORT=$port bash localstack/start.sh --check >/dev/null 2>&1; then
    started+=("$port")
  fi
  SLUICE_EMULATOR_PORT=$port bash localstack/start.sh
done

echo "== integration tests (emulator at $AWS_ENDPOINT_URL; the chaos run at $chaos_endpoint)"
chaos_log=$(mktemp)
SLUICE_REQUIRE_EMULATOR=1 AWS_ENDPOINT_URL=$chaos_endpoint \
  CHAOS_SEEDS="${CHAOS_SEEDS:-20}" go test -count=1 -timeout 30m -run '^TestChaos$' $GOTEST_FLAGS ./tests/chaos >"$chaos_log" 2>&1 &
chaos_pid=$!
status=0
SLUICE_REQUIRE_EMULATOR=1 go test -count=1 -timeout 30m -skip '^TestChaos$' $GOTEST_FLAGS ./... || status=1
chaos_status=0
wait "$chaos_pid" || chaos_status=1
echo "== the chaos run"
cat "$chaos_log"
rm -f "$chaos_log"
if [ "$status" != 0 ] || [ "$chaos_status" != 0 ]; then
  echo "== make test: FAILED (integration tests: $status, chaos run: $chaos_status)" >&2
  exit 1
fi

if [ -f infra/go.mod ]; then
  echo "== infra: CDK template tests and synth"
  make --no-print-directory synth-test
fi
echo "== make test: all passed"
