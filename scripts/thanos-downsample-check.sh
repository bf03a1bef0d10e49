#!/usr/bin/env bash
# make thanos-downsample-check (not in make test): holds Sluice's
# downsampled blocks against Thanos' own. Builds tools/thanoscheck (a module
# of its own, Thanos v0.41.0 on the Prometheus version it needs; the first
# build downloads Thanos' dependencies), writes raw blocks and Sluice's 5m
# and 1h downsamples of them (tests/bench/dstool), and has thanoscheck run
# Thanos' downsample.Downsample on the same raw blocks and compare every
# chunk byte for byte. Prints each block's downsampling throughput, Sluice
# against Thanos, in the same run. It also re-derives
# shared/downsample/testdata/thanos-golden.json.gz from Thanos' output and
# fails if the committed file differs (UPDATE_GOLDEN=1 rewrites it).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-thanoscheck-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "building tools/thanoscheck (Thanos' own downsampling)"
(cd tools/thanoscheck && go build -o "$work/thanoscheck" .)
go run ./tests/bench/dstool -out "$work/blocks" -series "${DS_SERIES:-2000}" >"$work/blocks.txt"
golden=shared/downsample/testdata/thanos-golden.json.gz
status=0
while read -r name raw d5 d1 samples secs; do
  args=()
  if [ "$name" = golden ]; then args=(-golden "$work/golden.json.gz"); fi
  mkdir -p "$work/thanos-$name"
  if ! "$work/thanoscheck" -raw "$raw" -sluice-5m "$d5" -sluice-1h "$d1" -work "$work/thanos-$name" "${args[@]}" >"$work/$name.txt" 2>&1; then
    status=1
  fi
  sed "s/^/$name: /" "$work/$name.txt" | grep -v thanos-seconds
  tsecs=$(sed -n 's/^thanos-seconds-to-5m=//p' "$work/$name.txt")
  if [ -n "$tsecs" ]; then
    awk -v n="$samples" -v s="$secs" -v t="$tsecs" -v name="$name" 'BEGIN {
      printf "%s: raw → 5m of %d samples: sluice %.0f samples/s, thanos %.0f samples/s (sluice/thanos %.2f)\n", name, n, n/s, n/t, t/s }'
  fi
done <"$work/blocks.txt"
if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$work/golden.json.gz" "$golden"
  echo "wrote $golden"
elif cmp -s <(gunzip -c "$work/golden.json.gz") <(gunzip -c "$golden"); then
  echo "$golden: Thanos writes the same chunks today"
else
  echo "FAIL: $golden differs from Thanos' output (UPDATE_GOLDEN=1 rewrites it)"
  status=1
fi
exit "$status"
