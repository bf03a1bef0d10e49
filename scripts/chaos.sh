#!/usr/bin/env bash
# make chaos: the seeded fault-injection run (tests/chaos) spread over
# CHAOS_EMULATORS emulators on consecutive ports from SLUICE_EMULATOR_PORT
# (each moto is one Python process: two use two cores). Emulators that
# already answer are used as they are; the ones started here are stopped
# on every exit path. The report is printed and kept in CHAOS_REPORT.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${SLUICE_EMULATOR_PORT:-4566}
n=${CHAOS_EMULATORS:-2}
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
started=()
follower=""
cleanup() {
  [[ -n $follower ]] && kill "$follower" 2>/dev/null || true
  for port in "${started[@]}"; do SLUICE_EMULATOR_PORT=$port bash localstack/stop.sh || true; done
}
trap cleanup EXIT
urls=()
for ((i = 0; i < n; i++)); do
  port=$((base + i))
  if ! SLUICE_EMULATOR_PORT=$port bash localstack/start.sh --check >/dev/null 2>&1; then
    started+=("$port")
  fi
  SLUICE_EMULATOR_PORT=$port bash localstack/start.sh
  urls+=("http://127.0.0.1:$port")
done
report=${CHAOS_REPORT:-.sluice/chaos-report.txt}
progress=$report.progress
mkdir -p "$(dirname "$report")" && rm -f "$report" "$progress"
# A line per seed as it ends (go test shows a passing run's output only
# when the run ends).
tail -n +1 -F "$progress" 2>/dev/null &
follower=$!
status=0
CHAOS_ENDPOINTS=$(IFS=,; echo "${urls[*]}") AWS_ENDPOINT_URL=${urls[0]} CHAOS_REPORT=$PWD/$report CHAOS_PROGRESS=$PWD/$progress SLUICE_REQUIRE_EMULATOR=1 \
  CHAOS_DOWNSAMPLE_UPLOADS=${CHAOS_DOWNSAMPLE_UPLOADS:-1} \
  go test ./tests/chaos -run '^TestChaos$' -count=1 -timeout 12h || status=$?
cat "$report" 2>/dev/null || true
exit "$status"
