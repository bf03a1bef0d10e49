# Sourced by the checks that run a deployment on an emulator of their own
# (thanos-check.sh, cortex-check.sh), from the repository root:
#
#   source scripts/own-emulator.sh
#   own_emulator PORT NAME
#
# builds bin/sluice and bin/sluice-local, points the AWS settings at
# 127.0.0.1:PORT, makes a scratch directory $work (sluice-NAME-XXXXXX), and
# starts the emulator there unless one already answers. On exit the
# scratch directory goes, and the emulator too if this started it.
# envfile_bucket FILE prints the SLUICE_BUCKET a provisioned settings file
# names, and fails when it names none.

own_emulator() {
  local port=$1 name=$2
  echo "== building sluice"
  mkdir -p bin && CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/... ./localstack/cmd/...

  export SLUICE_EMULATOR_PORT=$port
  export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
  work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-$name-XXXXXX")
  own_emulator_started=0
  trap own_emulator_cleanup EXIT
  if ! bash localstack/start.sh --check >/dev/null 2>&1; then own_emulator_started=1; fi
  bash localstack/start.sh
}

own_emulator_cleanup() {
  if [ "${own_emulator_started:-0}" = 1 ]; then bash localstack/stop.sh || true; fi
  rm -rf "$work"
}

envfile_bucket() {
  local bucket
  bucket=$(sed -n "s/^\(export \)\{0,1\}SLUICE_BUCKET='\{0,1\}\([^']*\)'\{0,1\}$/\2/p" "$1")
  [ -n "$bucket" ] || { echo "no SLUICE_BUCKET in $1" >&2; return 1; }
  echo "$bucket"
}
