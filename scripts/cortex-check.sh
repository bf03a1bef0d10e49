#!/usr/bin/env bash
# cortex-check: Cortex's own code over Sluice's bucket index (docs/protocol.md,
# "The bucket index"). Builds tools/cortexcheck inside a Cortex checkout,
# provisions local multi-tenant deployments with SLUICE_BUCKET_INDEX=cortex
# on their own emulator, uploads two tenants' blocks (team-b's replicated,
# RF 2), runs the pipeline, then has Cortex's bucketindex.ReadIndex read
# each tenant's index and Cortex's own updater build one from a listing of
# the bucket, and fails on any difference (tools/cortexcheck says which
# it checks). Two passes: "retiring", with an hour's deletion delay,
# stops with every source marked and not yet deleted; "settled", with a
# second's, stops with the sources deleted.
#
#   CORTEX_SRC=/path/to/cortex/checkout bash scripts/cortex-check.sh
#
# It builds from the checkout's vendor/ (Cortex commits one), offline, and
# leaves the checkout as it found it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

port=${CORTEX_CHECK_PORT:-4598}
if [ -z "${CORTEX_SRC:-}" ] || [ ! -f "$CORTEX_SRC/pkg/storage/tsdb/bucketindex/updater.go" ]; then
  echo "cortex-check: set CORTEX_SRC to a Cortex checkout (one with pkg/storage/tsdb/bucketindex)" >&2
  exit 2
fi
check=$root/.sluice/tools/cortexcheck
mkdir -p "$(dirname "$check")"
if [ ! -d "$CORTEX_SRC/vendor" ]; then
  # Without vendor/, go build -mod=mod would rewrite the checkout's go.mod.
  echo "cortex-check: $CORTEX_SRC has no vendor/ (Cortex commits one; a snapshot of the repository has it)" >&2
  exit 2
fi
echo "== building cortexcheck in $CORTEX_SRC (go build -mod=vendor; a few minutes cold)"
# Built from a directory of its own in the checkout, removed however the
# build ends.
into=$(mktemp -d "$CORTEX_SRC/cmd/sluice-cortexcheck-XXXXXX")
trap 'rm -rf "$into"' EXIT
cp tools/cortexcheck/main.go "$into/main.go"
(cd "$CORTEX_SRC" && go build -mod=vendor -o "$check" "./cmd/$(basename "$into")/main.go")
rm -rf "$into"
trap - EXIT

source scripts/own-emulator.sh
own_emulator "$port" cortex

echo "== two tenants, 12 × 2h blocks each; team-b's from two replicated ingesters"
bin/sluice gen "$work/team-a" --blocks 12 --series 200 --tenant team-a >/dev/null
bin/sluice gen "$work/team-b" --blocks 12 --rf 2 --series 200 --tenant team-b >/dev/null

# pass NAME DELETION_DELAY MARKS: one deployment through the pipeline,
# then the indexes against Cortex's; MARKS (some, none) is the deletion
# marks each index must list.
pass() {
  local name=$1 delay=$2 marks=$3
  local envfile=$work/$name.env
  echo "== pass $name: deletion delay $delay"
  bin/sluice-local provision --name "cortex-check-$name" --close-delay 1s --deletion-delay "$delay" --out "$envfile" >/dev/null
  echo "SLUICE_BUCKET_INDEX=cortex" >>"$envfile"
  bin/sluice --env-file "$envfile" upload --quiet --tenant team-a "$work"/team-a/*
  bin/sluice --env-file "$envfile" upload --quiet --tenant team-b "$work"/team-b/*
  bin/sluice --env-file "$envfile" run --until-idle
  sleep 2 # past a second's deletion delay
  bin/sluice --env-file "$envfile" run --until-idle
  # A few scheduled index passes, every 2 s (not before: --until-idle
  # never finds a pipeline idle that gets an index request every 2 s):
  # the last marks and deletions reach the index at the next one.
  echo "SLUICE_BUCKET_INDEX_INTERVAL=2s" >>"$envfile"
  local rc=0
  timeout -s INT 10 bin/sluice --env-file "$envfile" run --log "$work/$name-run.log" 2>/dev/null || rc=$?
  if [ $rc != 0 ] && [ $rc != 124 ]; then
    echo "cortex-check: pass $name: sluice run exited $rc" >&2
    exit 1
  fi
  bin/sluice --env-file "$envfile" verify
  local bucket
  bucket=$(envfile_bucket "$envfile")
  "$check" -marks "$marks" "127.0.0.1:$port" "$bucket" team-a team-b
}

pass retiring 1h some
pass settled 1s none
echo "cortex-check: passed"
