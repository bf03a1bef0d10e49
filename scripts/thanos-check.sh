#!/usr/bin/env bash
# thanos-check: Thanos' own verifier over a Thanos-layout deployment
# (docs/thanos.md). Provisions a local single-tenant deployment on its own
# emulator, writes the blocks of two Prometheus servers ({cluster="east"},
# {cluster="west"}), each two replicas told apart by replica="0"/"1",
# uploads them, runs the pipeline until idle and `sluice verify`, then
# `thanos tools bucket verify` (every issue but the repair-only ones) and
# `thanos tools bucket inspect`. Fails on any issue Thanos reports in the
# default pass. A second pass partitions on purpose (SLUICE_PARTITIONING=
# limits, 128 series per partition) and prints Thanos' verdict on that,
# which docs/thanos.md explains; it fails only if Thanos finds anything
# but overlapped_blocks there.
#
#   THANOS=/path/to/thanos bash scripts/thanos-check.sh
#   THANOS_SRC=/path/to/thanos/checkout bash scripts/thanos-check.sh   (builds it)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

port=${THANOS_CHECK_PORT:-4597}
thanos=${THANOS:-}
if [ -z "$thanos" ]; then
  if [ -z "${THANOS_SRC:-}" ]; then
    echo "thanos-check: set THANOS to a thanos binary, or THANOS_SRC to a Thanos checkout to build one" >&2
    exit 2
  fi
  thanos=$root/.sluice/tools/thanos
  echo "== building thanos from $THANOS_SRC (go build ./cmd/thanos)"
  (cd "$THANOS_SRC" && GOFLAGS=-mod=mod go build -o "$thanos" ./cmd/thanos)
fi
"$thanos" --version 2>&1 | head -1

source scripts/own-emulator.sh
own_emulator "$port" thanos

echo "== two Prometheus servers, two replicas each (12 × 2h blocks per replica)"
bin/sluice gen "$work/east" --blocks 12 --rf 2 --series 200 --tenant east --label cluster=east --replica-label replica >/dev/null
bin/sluice gen "$work/west" --blocks 12 --rf 2 --series 200 --tenant west --label cluster=west --replica-label replica >/dev/null

# pass NAME EXPECT [SETTING=VALUE...]: one deployment through the pipeline
# and Thanos' verdict on its bucket. EXPECT is "clean" or "overlaps".
pass() {
  local name=$1 expect=$2
  shift 2
  local envfile=$work/$name.env
  echo "== pass $name: ${*:-defaults}"
  bin/sluice-local provision --name "$name" --close-delay 1s --deletion-delay 1s --out "$envfile" >/dev/null
  {
    echo "SLUICE_LAYOUT=single-tenant"
    echo "SLUICE_TENANT=thanos"
    echo "SLUICE_REPLICA_LABELS=replica"
    for kv in "$@"; do echo "$kv"; done
  } >>"$envfile"
  bin/sluice --env-file "$envfile" upload --quiet "$work"/east/* "$work"/west/*
  bin/sluice --env-file "$envfile" run --until-idle
  sleep 2 # past the deletion delay: the sources' deletion goes through
  bin/sluice --env-file "$envfile" run --until-idle
  bin/sluice --env-file "$envfile" verify
  bin/sluice --env-file "$envfile" status | grep -E "note:|TENANT" || true

  local bucket
  bucket=$(envfile_bucket "$envfile")
  cat >"$work/$name-objstore.yml" <<EOF
type: S3
config:
  bucket: $bucket
  endpoint: 127.0.0.1:$port
  region: us-east-1
  access_key: test
  secret_key: test
  insecure: true
  bucket_lookup_type: path
EOF
  if ! "$thanos" tools bucket inspect --objstore.config-file="$work/$name-objstore.yml" >"$work/$name-inspect.txt" 2>"$work/$name-inspect.log"; then
    cat "$work/$name-inspect.log"
    echo "thanos-check: pass $name: thanos tools bucket inspect failed" >&2
    exit 1
  fi
  cat "$work/$name-inspect.txt"
  local log=$work/$name-verify.log
  "$thanos" tools bucket verify --objstore.config-file="$work/$name-objstore.yml" \
    --issues=overlapped_blocks --issues=index_known_issues --issues=duplicated_compaction >"$log" 2>&1 || {
    cat "$log"
    echo "thanos-check: pass $name: thanos tools bucket verify failed to run" >&2
    exit 1
  }
  local found
  found=$(grep -ciE 'level=(warn|error)|found overlapped|issue' "$log" | tr -d ' ' || true)
  grep -iE 'level=(warn|error)|overlap|issue' "$log" | sed 's/^/  thanos: /' || true
  case $expect in
    clean)
      if grep -qiE 'level=(warn|error)|found overlapped' "$log"; then
        echo "thanos-check: pass $name: Thanos reported issues ($found line(s)); see above" >&2
        exit 1
      fi
      echo "thanos-check: pass $name: thanos tools bucket verify found no issue"
      ;;
    overlaps)
      if grep -iE 'level=(warn|error)' "$log" | grep -viq 'overlap'; then
        echo "thanos-check: pass $name: Thanos reported more than overlapped_blocks" >&2
        exit 1
      fi
      echo "thanos-check: pass $name: Thanos reports the partitions as overlapped_blocks, as docs/thanos.md says"
      ;;
  esac
}

pass thanos-default clean
pass thanos-partitioned overlaps SLUICE_PARTITIONING=limits SLUICE_MAX_SERIES_PER_PARTITION=128
echo "thanos-check: passed"
