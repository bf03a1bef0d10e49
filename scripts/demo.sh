#!/usr/bin/env bash
# make demo: start the local AWS platform (localstack/start.sh: LocalStack
# with Docker, moto without), build bin/sluice and bin/sluice-local, and run
# `sluice-local demo`:
# two tenants' blocks uploaded, compacted race-free, verified. The platform
# is left running; `make down` stops it.
#
#   scripts/demo.sh [sluice-local demo flags]    e.g. --seed 42, --series 500
set -euo pipefail
cd "$(dirname "$0")/.."
export AWS_ENDPOINT_URL="${AWS_ENDPOINT_URL:-http://127.0.0.1:4566}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"

began=$SECONDS
echo "== starting the local AWS platform on $AWS_ENDPOINT_URL"
bash localstack/start.sh
echo "== building bin/sluice and bin/sluice-local"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -o bin/sluice ./cmd/sluice
CGO_ENABLED=0 go build -trimpath -o bin/sluice-local ./localstack/cmd/sluice-local
echo "== ready in $((SECONDS - began))s"
echo
status=0
bin/sluice-local demo "$@" || status=$?
echo "(make demo took $((SECONDS - began))s in all)"
exit "$status"
