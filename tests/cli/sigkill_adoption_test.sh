#!/usr/bin/env bash
# A gateway killed with SIGKILL while it holds an active and a warm sandbox (issue 13 B): a
# second gateway sharing its SQLite lease file must adopt nothing while the dead one's leases
# are live, adopt both once they lapse (one TTL, 2 s here), reap them after its idle timeout,
# and leave the engine with no container of ours. Prints the counts and times.
set -u
ctl="$1"
# shellcheck source=engine_lib.sh
source "$(dirname "$0")/engine_lib.sh"
require_engine
work=$(mktemp -d)
prefix="sigkill-$$"
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill -9 "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  remove_our_containers
  rm -rf "$work"
}
trap cleanup EXIT
# A renews every second with a 2 s TTL; B reaps what is idle for 3 s.
for name in a b; do
  idle=600
  [ "$name" = b ] && idle=3
  cat >"$work/$name.json" <<JSON
{"sandbox": {"backend": {"use": "local_docker:LocalContainerBackend", "image": "$image",
  "socket": "unix://$socket", "container_prefix": "$prefix"},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/leases.db",
                "renewal_interval_seconds": 1, "ttl_multiplier": 2},
  "base_dir": "$work/state-$name", "idle_timeout": $idle}}
JSON
done

"$ctl" --config "$work/a.json" serve >"$work/serve.out" 2>"$work/serve.log" &
serve_pid=$!
sock="$work/state-a/serve.sock"
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "FAIL: serve did not start"; cat "$work/serve.log"; exit 1; }
api() { curl -s --max-time 60 --unix-socket "$sock" "$@"; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2" 2>/dev/null; }
active=$(field "$(api -X POST -d '{"user_id": "ann", "thread_id": "t-active"}' http://x/v1/sandboxes/acquire)" sandbox_id)
warm=$(field "$(api -X POST -d '{"user_id": "ann", "thread_id": "t-warm"}' http://x/v1/sandboxes/acquire)" sandbox_id)
api -X POST "http://x/v1/sandboxes/$warm/release" >/dev/null
[ -n "$active" ] && [ -n "$warm" ] || { echo "FAIL: A could not acquire"; cat "$work/serve.log"; exit 1; }
held=$(count_our_containers)

kill -9 "$serve_pid"; wait "$serve_pid" 2>/dev/null; serve_pid=""
killed=$(date +%s.%N)
since_kill() { python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$killed"; }
adopted_of() { python3 -c 'import json,sys; print(json.load(sys.stdin)["adopted"])' 2>/dev/null || echo 0; }

failures=0
early=$("$ctl" --config "$work/b.json" reconcile --json 2>>"$work/b.log" | adopted_of)
early_at=$(since_kill)
[ "$early" = 0 ] || { echo "FAIL: B adopted $early sandboxes ${early_at}s after the kill, while their leases were live"; failures=$((failures + 1)); }

adopted=0 adopted_at=""
for _ in $(seq 1 60); do
  n=$("$ctl" --config "$work/b.json" reconcile --json 2>>"$work/b.log" | adopted_of)
  adopted=$((adopted + n))
  [ "$adopted" -ge 2 ] && { adopted_at=$(since_kill); break; }
  sleep 0.5
done
[ "$adopted" -eq 2 ] || { echo "FAIL: B adopted $adopted of 2 orphans within 30 s"; cat "$work/b.log"; failures=$((failures + 1)); }

left="$held" reaped_at=""
for _ in $(seq 1 60); do
  "$ctl" --config "$work/b.json" reap >/dev/null 2>>"$work/b.log" || true
  left=$(count_our_containers)
  [ "$left" = 0 ] && { reaped_at=$(since_kill); break; }
  sleep 0.5
done
[ "$left" = 0 ] || { echo "FAIL: $left containers of ours left on the engine"; failures=$((failures + 1)); }

echo "[ figures ] A held $held containers (1 active, 1 warm), killed with SIGKILL; B adopted $early at ${early_at}s (leases live, TTL 2 s), $adopted by ${adopted_at:-never}s; reaped to $left containers by ${reaped_at:-never}s (idle timeout 3 s)"
echo "sigkill adoption: $((3 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
