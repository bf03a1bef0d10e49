#!/usr/bin/env bash
# promtool-check: proves that Prometheus' own tooling reads what the block
# engine writes. Installs promtool at the Prometheus version in go.mod into
# a local tools dir if missing, writes synthetic sources and compacts them
# (N=1, N=4, and the N=4 outputs again with N=2; blocktool checks sample
# equivalence of each), then runs `promtool tsdb analyze` on every block.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
tools=${SLUICE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/tools}/promtool-$version
promtool=$tools/promtool
if [ ! -x "$promtool" ]; then
  echo "installing promtool $version into $tools"
  mkdir -p "$tools"
  GOBIN=$tools go install "github.com/prometheus/prometheus/cmd/promtool@$version"
fi
echo "promtool $version: $promtool"

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-promtool-XXXXXX")
trap 'rm -rf "$work"' EXIT
go run ./tests/bench/blocktool -out "$work/db" >"$work/blocks.txt"

checked=0 failed=0
while read -r db id; do
  if "$promtool" tsdb analyze "$db" "$id" >"$work/analyze.txt" 2>&1 \
     && grep -q "Block ID: $id" "$work/analyze.txt"; then
    checked=$((checked + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: promtool tsdb analyze ${db#"$work"/} $id"
    sed 's/^/  /' "$work/analyze.txt" | head -20
  fi
done <"$work/blocks.txt"
# One full report for the log: the last partitioned output.
last=$(tail -1 "$work/blocks.txt")
echo "== promtool tsdb analyze ${last#"$work"/} (excerpt)"
# shellcheck disable=SC2086
"$promtool" tsdb analyze $last >"$work/analyze.txt" 2>&1
head -12 "$work/analyze.txt"
if [ "$failed" -ne 0 ]; then
  echo "promtool-check: $failed of $((checked + failed)) blocks FAILED"
  exit 1
fi
echo "promtool-check: promtool tsdb analyze opened all $checked blocks"
