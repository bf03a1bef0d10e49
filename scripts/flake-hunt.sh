#!/usr/bin/env bash
# make flake-hunt: run tests many times with the machine loaded and count
# each test's failures. Not part of make test.
#
#   FLAKE_RUNS=20                       how many times (default 20)
#   FLAKE_PKGS="./shared/eventsource"  packages (default: every package
#                                       with integration tests)
#   FLAKE_RUN='^TestPoison'             go test -run (default: all)
#   FLAKE_SKIP='^TestChaos$'            go test -skip (default: the chaos
#                                       run, which has make chaos)
#   FLAKE_LOAD=2                        busy loops beside the tests
#                                       (default: one per core)
#   FLAKE_PORT=4570                     the emulator's port; one is started
#                                       there unless one already answers
#
# Every run's `go test -json` output is kept under .sluice/flake-hunt/, and
# the table at the end (test, runs, failures) is in
# .sluice/flake-hunt/report.txt. Exit status 1 if any test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${FLAKE_RUNS:-20}
pkgs=${FLAKE_PKGS:-./localstack/... ./shared/... ./tests/e2e ./tests/races ./tests/demo}
run=${FLAKE_RUN:-}
skip=${FLAKE_SKIP:-^TestChaos\$}
load=${FLAKE_LOAD:-$(nproc)}
port=${FLAKE_PORT:-4570}
out=.sluice/flake-hunt
mkdir -p "$out" && rm -f "$out"/run-*.json "$out"/report.txt

export SLUICE_EMULATOR_PORT=$port
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"

started=0
burners=()
cleanup() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ "$started" = 1 ]; then bash localstack/stop.sh || true; fi
}
trap cleanup EXIT
if ! bash localstack/start.sh --check >/dev/null 2>&1; then started=1; fi
bash localstack/start.sh

# Build the test binaries before the load starts: the hunt is about the
# tests, not about the compiler.
# shellcheck disable=SC2086
go test -count=1 -run '^$' $pkgs >/dev/null

for ((i = 0; i < load; i++)); do
  bash -c 'while :; do :; done' &
  burners+=($!)
done
echo "flake-hunt: $runs runs of $pkgs${run:+ -run $run} with $load busy loop(s) beside them"

for ((i = 1; i <= runs; i++)); do
  start=$(date +%s)
  # shellcheck disable=SC2086
  SLUICE_REQUIRE_EMULATOR=1 go test -json -count=1 -timeout 30m ${run:+-run "$run"} ${skip:+-skip "$skip"} $pkgs \
    >"$out/run-$i.json" 2>&1 || true
  fails=$(grep -c '"Action":"fail"' "$out/run-$i.json" || true)
  echo "flake-hunt: run $i/$runs done in $(( $(date +%s) - start ))s, $fails failed test(s) and package(s)"
done

python3 - "$out" "$runs" <<'EOF' | tee "$out/report.txt"
import json, os, sys
out, runs = sys.argv[1], int(sys.argv[2])
passed, failed, first = {}, {}, {}
for i in range(1, runs + 1):
    path = os.path.join(out, f"run-{i}.json")
    if not os.path.exists(path):
        continue
    for line in open(path, errors="replace"):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("Action") not in ("pass", "fail"):
            continue
        name = ev.get("Package", "?") + (" " + ev["Test"] if ev.get("Test") else " (package)")
        if "/" in ev.get("Test", ""):
            continue  # subtests are counted in their parent
        d = passed if ev["Action"] == "pass" else failed
        d[name] = d.get(name, 0) + 1
        if ev["Action"] == "fail":
            first.setdefault(name, i)
names = sorted(set(passed) | set(failed), key=lambda n: (-failed.get(n, 0), n))
width = max([len(n) for n in names] + [4])
print(f"{'test':<{width}}  runs  failures")
for n in names:
    total = passed.get(n, 0) + failed.get(n, 0)
    note = f"  (first in run {first[n]}: {out}/run-{first[n]}.json)" if n in failed else ""
    print(f"{n:<{width}}  {total:>4}  {failed.get(n, 0):>8}{note}")
bad = sum(1 for n in names if failed.get(n))
print(f"\n{len(names)} tests and packages, {bad} with failures, over {runs} runs")
sys.exit(1 if bad else 0)
EOF
