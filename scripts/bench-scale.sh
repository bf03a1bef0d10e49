#!/usr/bin/env bash
# make bench-scale: issue 11's measurement, not part of make test. It runs
# tests/bench/scale with SLUICE_BENCH_SCALE=1 against the in-memory AWS
# emulator served on a port (localstack/memaws); with
# SLUICE_SCALE_BACKEND=emulator it starts moto on SCALE_PORT (4575) instead
# and stops it again. The generated input is kept under
# ~/.cache/sluice/bench-scale (SLUICE_SCALE_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
if [ "${SLUICE_SCALE_BACKEND:-memaws}" = emulator ]; then
  port=${SCALE_PORT:-4575}
  started=0
  if ! SLUICE_EMULATOR_PORT=$port bash localstack/start.sh --check >/dev/null 2>&1; then
    started=1
  fi
  SLUICE_EMULATOR_PORT=$port bash localstack/start.sh
  cleanup() { if [ "$started" = 1 ]; then SLUICE_EMULATOR_PORT=$port bash localstack/stop.sh || true; fi; }
  trap cleanup EXIT
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
fi
mkdir -p .sluice
SLUICE_BENCH_SCALE=1 SLUICE_SCALE_REPORT="${SLUICE_SCALE_REPORT:-$PWD/.sluice/bench-scale.txt}" \
  go test ./tests/bench/scale -run '^TestScale$' -count=1 -v -timeout 6h
