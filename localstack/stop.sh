#!/usr/bin/env bash
# Stop exactly what localstack/start.sh started on $SLUICE_EMULATOR_PORT
# (default 4566), wait until the port is closed, and leave no process behind.
# An emulator that start.sh did not start is left alone.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
port=${SLUICE_EMULATOR_PORT:-4566}
url="http://127.0.0.1:$port"
state="$root/.sluice"
pidfile="$state/emulator-$port.pid"
kindfile="$state/emulator-$port.kind"

say() { echo "localstack/stop.sh: $*" >&2; }

answers() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/" 2>/dev/null || true)
  [ -n "$code" ] && [ "$code" != "000" ]
}

# group_alive: some process of group $1 still runs. A zombie does not count:
# once start.sh has exited, our server's parent is init, which may take a
# while to reap it.
group_alive() {
  ps -e -o pgid=,stat= 2>/dev/null | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}

# ours: pid $1 runs moto_serial.py (a recycled pid must not be killed).
ours() {
  local cmd
  cmd=$(ps -o args= -p "$1" 2>/dev/null || true)
  [[ "$cmd" == *moto_serial.py* ]]
}

stop_moto() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [ -z "$pid" ]; then
    say "no pidfile $pidfile: nothing to stop"
    return 0
  fi
  if ! ours "$pid"; then
    # moto_serial is one process (its requests are threads), so when it is
    # gone its group is gone; a recycled pid belongs to someone else.
    say "moto_serial (pid $pid) already gone"
    rm -f "$pidfile" "$kindfile"
    return 0
  fi
  kill -TERM -- "-$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while group_alive "$pid"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "moto_serial (pid $pid) ignored SIGTERM for 10s; killing its group"
      kill -KILL -- "-$pid" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
  rm -f "$pidfile" "$kindfile"
  say "stopped moto_serial (pid $pid) on $url"
}

stop_localstack() {
  local dc=(docker compose)
  if ! docker compose version >/dev/null 2>&1 && command -v docker-compose >/dev/null 2>&1; then
    dc=(docker-compose)
  fi
  SLUICE_EMULATOR_PORT=$port "${dc[@]}" -p "sluice-$port" -f "$here/docker-compose.yml" down --remove-orphans >&2
  rm -f "$pidfile" "$kindfile"
  say "stopped LocalStack (docker compose project sluice-$port)"
}

case "$(cat "$kindfile" 2>/dev/null || echo none)" in
  localstack) stop_localstack ;;
  moto) stop_moto ;;
  *)
    if [ -f "$pidfile" ]; then
      stop_moto
    else
      if answers; then
        say "the emulator on $url was not started by start.sh; leaving it alone"
      else
        say "nothing started by start.sh on port $port"
      fi
      exit 0
    fi
    ;;
esac

# The port must be closed before we return, so a following start binds it.
deadline=$((SECONDS + 10))
while answers; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    say "something still answers on $url"
    exit 1
  fi
  sleep 0.1
done
