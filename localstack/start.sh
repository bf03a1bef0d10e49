#!/usr/bin/env bash
# Start the local AWS platform on http://127.0.0.1:$SLUICE_EMULATOR_PORT
# (default 4566) and wait until it answers.
#
#   start.sh          start (LocalStack if a Docker engine answers, else
#                     moto behind localstack/moto_serial.py); harmless when
#                     an emulator already answers on the port
#   start.sh --check  exit 0 iff the endpoint answers; start nothing
#   start.sh --reset  forget every bucket, table and queue in the emulator
#
# Environment:
#   SLUICE_EMULATOR_PORT  port (default 4566)
#   SLUICE_EMULATOR       "moto" or "localstack" to force one (default: auto)
#   LOCALSTACK_AUTH_TOKEN passed through to LocalStack when set
#
# What it starts is recorded under .sluice/ (gitignored), so stop.sh ends
# exactly that and nothing else.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
port=${SLUICE_EMULATOR_PORT:-4566}
url="http://127.0.0.1:$port"
state="$root/.sluice"
pidfile="$state/emulator-$port.pid"
kindfile="$state/emulator-$port.kind"
logfile="$state/emulator-$port.log"
start_timeout=${SLUICE_EMULATOR_START_TIMEOUT:-60}

say() { echo "localstack/start.sh: $*" >&2; }

# answers: the endpoint returns any HTTP response within 2 seconds.
answers() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/" 2>/dev/null || true)
  [ -n "$code" ] && [ "$code" != "000" ]
}

# is_moto: the endpoint serves moto's management API.
is_moto() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/moto-api/" 2>/dev/null || true)" = 200 ]
}

docker_answers() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1
}

compose() {
  local dc=(docker compose)
  if ! docker compose version >/dev/null 2>&1 && command -v docker-compose >/dev/null 2>&1; then
    dc=(docker-compose)
  fi
  SLUICE_EMULATOR_PORT=$port "${dc[@]}" -p "sluice-$port" -f "$here/docker-compose.yml" "$@"
}

wait_until_answers() {
  local what=$1 pid=${2:-} deadline=$((SECONDS + start_timeout))
  until answers; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      say "$what exited before answering; last lines of $logfile:"
      tail -n 20 "$logfile" >&2 || true
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "$what did not answer on $url within ${start_timeout}s; see $logfile"
      return 1
    fi
    sleep 0.2
  done
}

ensure_moto() {
  if python3 -c 'import moto, werkzeug, flask' >/dev/null 2>&1; then
    return 0
  fi
  say "moto is not installed for $(command -v python3 || echo 'python3 (missing)'); installing moto[server]>=5.2.1 from PyPI"
  if ! python3 -m pip install --quiet --disable-pip-version-check --timeout 20 'moto[server]>=5.2.1' >&2; then
    say "could not install moto: PyPI is unreachable from here or pip failed."
    say "Install it yourself (python3 -m pip install 'moto[server]>=5.2.1') or run a Docker engine for LocalStack."
    return 1
  fi
}

start_moto() {
  ensure_moto
  : >"$logfile"
  # --setsid: the server leads its own process group, which stop.sh kills whole.
  # 9>&-: the server must not inherit start.sh's lock.
  nohup python3 "$here/moto_serial.py" -p "$port" --setsid >>"$logfile" 2>&1 </dev/null 9>&- &
  local pid=$!
  echo "$pid" >"$pidfile"
  echo moto >"$kindfile"
  if ! wait_until_answers "moto_serial (pid $pid)" "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    rm -f "$pidfile" "$kindfile"
    return 1
  fi
  say "started moto $(python3 -c 'import moto; print(moto.__version__)') behind moto_serial.py (pid $pid, log $logfile) on $url"
}

start_localstack() {
  compose up -d >&2
  echo localstack >"$kindfile"
  wait_until_answers "LocalStack"
  # The init hook (init/ready.d) has run once the ready stage completes.
  local deadline=$((SECONDS + start_timeout))
  until curl -s --max-time 2 "$url/_localstack/init/ready" | grep -q '"completed": *true'; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "LocalStack answers but its init hooks did not complete within ${start_timeout}s"
      return 1
    fi
    sleep 0.5
  done
  say "started LocalStack (docker compose project sluice-$port) on $url"
}

reset() {
  if ! answers; then
    say "nothing answers on $url"
    return 1
  fi
  if is_moto; then
    curl -s -f -o /dev/null --max-time 10 -X POST "$url/moto-api/reset"
    say "reset moto on $url"
  elif curl -s -f -o /dev/null --max-time 30 -X POST "$url/_localstack/state/reset"; then
    say "reset LocalStack on $url"
  elif [ "$(cat "$kindfile" 2>/dev/null)" = localstack ]; then
    compose restart >&2
    wait_until_answers "LocalStack"
    say "restarted LocalStack on $url"
  else
    say "do not know how to reset the emulator on $url"
    return 1
  fi
}

case "${1:-}" in
  --check)
    answers
    exit
    ;;
  --reset)
    reset
    exit
    ;;
  "") ;;
  *)
    echo "usage: $0 [--check|--reset]" >&2
    exit 2
    ;;
esac

mkdir -p "$state"
# Two concurrent starts (two test runs) must not both start a server: the
# second waits here, then finds the first one answering.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$state/emulator-$port.lock"
  flock -w $((start_timeout + 30)) 9 || { say "timed out waiting for another start.sh"; exit 1; }
fi
if answers; then
  if [ -f "$pidfile" ] || [ -f "$kindfile" ]; then
    say "already running on $url ($(cat "$kindfile" 2>/dev/null || echo unknown), started by start.sh)"
  else
    say "an emulator already answers on $url (not started by start.sh; stop.sh will leave it alone)"
  fi
  exit 0
fi
# Nothing answers. A server that a previous start left behind (hung, or
# still importing) is stopped first, so it cannot linger untracked.
if [ -f "$pidfile" ] || [ -f "$kindfile" ]; then
  bash "$here/stop.sh" 9>&- || true
fi

case "${SLUICE_EMULATOR:-auto}" in
  localstack) start_localstack ;;
  moto) start_moto ;;
  auto)
    if docker_answers; then start_localstack; else start_moto; fi
    ;;
  *)
    say "SLUICE_EMULATOR must be moto, localstack or auto, not ${SLUICE_EMULATOR}"
    exit 2
    ;;
esac
