#!/usr/bin/env bash
# Two gateways on one Redis and one engine, for a while: A (a `sandboxctl serve` renewing its
# leases every second) acquires and releases three conversations continuously; B (one-shot
# sandboxctl commands on another state directory) reconciles and reaps continuously. B must
# adopt nothing and A must never lose a sandbox: each conversation is created once, then only
# reused or reclaimed. At the end A destroys everything and the engine has nothing of ours.
set -u
ctl="$1"
# shellcheck source=engine_lib.sh
source "$(dirname "$0")/engine_lib.sh"
require_engine
redis="${SANDBOXD_TEST_REDIS_URL:-}"
duration="${REDIS_PEERS_SECONDS:-20}"
if [ -z "$redis" ]; then
  echo "SKIP: needs SANDBOXD_TEST_REDIS_URL (scripts/test.sh)"
  exit 77
fi
work=$(mktemp -d)
prefix="peers-$$"
keys="peers:$$"
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  remove_our_containers
  rm -rf "$work"
}
trap cleanup EXIT
for name in a b; do
  idle=600
  [ "$name" = b ] && idle=0  # B's leases are not stretched to an idle timeout: a 4 s TTL
  cat >"$work/$name.json" <<JSON
{"sandbox": {"backend": {"use": "local_docker:LocalContainerBackend", "image": "$image",
  "socket": "unix://$socket", "container_prefix": "$prefix"},
  "ownership": {"use": "ownership_redis:RedisOwnershipStore", "url": "$redis",
                "key_prefix": "$keys", "renewal_interval_seconds": 1, "ttl_multiplier": 4},
  "base_dir": "$work/state-$name", "idle_timeout": $idle}}
JSON
done

"$ctl" --config "$work/a.json" serve --on-exit destroy >"$work/serve.out" 2>"$work/serve.log" &
serve_pid=$!
sock="$work/state-a/serve.sock"
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "FAIL: serve did not start"; cat "$work/serve.log"; exit 1; }
api() { curl -s --max-time 60 --unix-socket "$sock" "$@"; }

declare -A first_id
created=0 reused=0 reclaimed=0 other=0 lost=0 adopted=0 reconciles=0 iterations=0
end=$(( $(date +%s) + duration ))
(  # B: reconcile and reap continuously, on its own state directory
  while [ "$(date +%s)" -lt "$end" ]; do
    "$ctl" --config "$work/b.json" reconcile --json 2>>"$work/b.log" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["adopted"])' >>"$work/b.adopted" || true
    "$ctl" --config "$work/b.json" reap >/dev/null 2>>"$work/b.log" || true
  done
) &
peer=$!
while [ "$(date +%s)" -lt "$end" ]; do
  for t in t-1 t-2 t-3; do
    out=$(api -X POST -d "{\"user_id\": \"ann\", \"thread_id\": \"$t\"}" http://x/v1/sandboxes/acquire)
    id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandbox_id"])' "$out" 2>/dev/null)
    path=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["path"])' "$out" 2>/dev/null)
    case "$path" in
      created) created=$((created + 1)) ;;
      reused) reused=$((reused + 1)) ;;
      reclaimed) reclaimed=$((reclaimed + 1)) ;;
      *) other=$((other + 1)); echo "acquire of $t answered: $out" ;;
    esac
    if [ -z "${first_id[$t]:-}" ]; then first_id[$t]="$id"; elif [ "${first_id[$t]}" != "$id" ]; then lost=$((lost + 1)); fi
    api -X POST "http://x/v1/sandboxes/$id/release" >/dev/null
  done
  iterations=$((iterations + 1))
done
wait "$peer"
reconciles=$(wc -l <"$work/b.adopted" 2>/dev/null || echo 0)
adopted=$(awk '{s += $1} END {print s + 0}' "$work/b.adopted" 2>/dev/null)
losses=$(api http://x/metrics | awk '/^sandboxd_lease_losses_total/ {print $2}')
echo "[ figures ] ${duration}s: $iterations rounds of 3 acquire+release on A ($created created, $reused reused, $reclaimed reclaimed, $other failed); $reconciles reconcile passes on B adopted $adopted; A's lease losses: $losses"

failures=0
[ "$created" -eq 3 ] || { echo "FAIL: A created $created sandboxes for 3 conversations (a peer destroyed or took one)"; failures=$((failures + 1)); }
[ "$other" -eq 0 ] || { echo "FAIL: $other acquires failed"; failures=$((failures + 1)); }
[ "$lost" -eq 0 ] || { echo "FAIL: a conversation changed sandbox $lost times"; failures=$((failures + 1)); }
[ "$adopted" -eq 0 ] || { echo "FAIL: B adopted $adopted of A's live sandboxes"; failures=$((failures + 1)); }
[ "${losses:-1}" = 0 ] || { echo "FAIL: A lost $losses leases"; failures=$((failures + 1)); }
[ "$reconciles" -ge 3 ] || { echo "FAIL: B reconciled only $reconciles times: the test proved little"; failures=$((failures + 1)); }

kill "$serve_pid"; wait "$serve_pid"; serve_pid=""
for _ in $(seq 1 100); do
  left=$(count_our_containers)
  [ "$left" = 0 ] && break
  sleep 0.1
done
[ "$left" = 0 ] || { echo "FAIL: $left containers left after serve --on-exit destroy"; failures=$((failures + 1)); }
echo "redis peers: $((7 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
