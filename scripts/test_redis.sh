#!/usr/bin/env bash
# Starts and stops the Redis the ownership_redis tests use: Debian's redis-server on 127.0.0.1,
# on a free port, with no persistence, in a private directory; stopped by PID.
#
#   bash scripts/test_redis.sh start    # start it (idempotent) and print where
#   bash scripts/test_redis.sh stop     # stop it (idempotent)
#   bash scripts/test_redis.sh env      # SANDBOXD_TEST_REDIS_URL (and _PORT) for a shell
#   bash scripts/test_redis.sh status   # say whether it answers
#
# State lives in $SANDBOXD_REDIS_DIR (default /tmp/sandboxd-test-redis): redis.pid, redis.port,
# redis.log.
set -euo pipefail

DIR="${SANDBOXD_REDIS_DIR:-/tmp/sandboxd-test-redis}"
PIDFILE="$DIR/redis.pid"
PORTFILE="$DIR/redis.port"
LOGFILE="$DIR/redis.log"

die() { echo "test_redis: error: $*" >&2; exit 1; }
say() { echo "test_redis: $*"; }

server_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-server" || return 1
  echo "$pid"
}

port() { cat "$PORTFILE" 2>/dev/null || true; }

answers() {
  local p
  p="$(port)"
  [ -n "$p" ] && [ "$(redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null || true)" = PONG ]
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cmd_start() {
  command -v redis-server >/dev/null || die "redis-server is not installed (run scripts/setup.sh)"
  command -v redis-cli >/dev/null || die "redis-cli is not installed (run scripts/setup.sh)"
  if server_pid >/dev/null && answers; then
    say "redis already running on 127.0.0.1:$(port)"
    return
  fi
  mkdir -p "$DIR"
  local p
  p="$(free_port)"
  echo "$p" >"$PORTFILE"
  setsid redis-server --bind 127.0.0.1 --port "$p" --save "" --appendonly no --dir "$DIR" \
    --daemonize no --logfile "$LOGFILE" </dev/null >/dev/null 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 100); do
    answers && { say "redis up on 127.0.0.1:$p (pid $(cat "$PIDFILE"))"; return; }
    sleep 0.05
  done
  tail -n 20 "$LOGFILE" >&2 || true
  die "redis-server did not answer PING on 127.0.0.1:$p within 5s (see $LOGFILE)"
}

cmd_stop() {
  local pid
  if pid="$(server_pid)"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
    say "redis stopped (pid $pid)"
  else
    say "redis not running"
  fi
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env)
    echo "export SANDBOXD_TEST_REDIS_URL=redis://127.0.0.1:$(port)/0"
    echo "export SANDBOXD_TEST_REDIS_PORT=$(port)"
    echo "export SANDBOXD_TEST_REDIS_DIR=$DIR"
    ;;
  status) if server_pid >/dev/null && answers; then say "running on 127.0.0.1:$(port)"; else say "not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|env|status   (state dir: \$SANDBOXD_REDIS_DIR)" >&2; exit 2 ;;
esac
