#!/usr/bin/env bash
# The benchmark run behind BENCHMARKS.md, against ./build (scripts/setup.sh builds it):
#   1. sandboxd_bench: DeerFlow's provider scenarios on the in-process backend, the warm pair
#      beside 0/1,000/10,000 active conversations, shutdown with 1,000/10,000 tracked, memory
#      per tracked sandbox, the warm pair beside 500 conversations with and without the
#      operator page's usage sampler sweeping them; rows in build/bench/rows.jsonl,
#      the summary table on stdout;
#   2. syscalls per new conversation: strace -c of N and of 1 new conversations, the difference
#      divided by N - 1 (set-up and exit cancel out);
#   3. instructions per warm acquire+release: callgrind of N and of 1 warm pairs, likewise
#      (deterministic on a noisy machine); then the same pair beside 0, 1,000 and 10,000 other
#      active conversations (0 only with --quick), only the pairs counted
#      (--toggle-collect), so a lookup that grows with the fleet shows as a ratio.
#   4. with --engine ENGINE (podman or docker): sandboxd_engine_bench on that test engine
#      (scripts/test_engine.sh starts it; one it started is stopped again): the provider's cold
#      acquire, warm reclaim and replica pressure beside the engine's own create-to-ready,
#      inspect and stop, alternating round by round; then the CPU of 5 released sandboxes
#      over 60 s warm and 60 s paused (5 s each with --quick); pre-started slots: a
#      new conversation claimed from a ready slot beside one created cold, the slots' hit rate,
#      and bench/provisioner_slots.py, the same through sandboxd-provisioner.
#   5. bench/kubernetes_listing.py: one `sandboxctl reconcile` over 1,000 and 10,000
#      pods in the Kubernetes stand-in (1,000 only with --quick): API requests and time per pod;
#      bench/kubernetes_readiness.py: from a pod turning Ready to `sandboxctl acquire` returning,
#      the backend watching the pod beside it polling (10 rounds; 2 with --quick).
#   6. sandboxd_relay_bench: per-request latency added by the relay (kept-alive and
#      new connections), a 64 MiB download's throughput and an upgraded pipe's echo, against the
#      same in-process sandbox reached directly; bench/relay_scale.py: 500 isolated sandboxes
#      (100 with --quick) held by one serve, memory and descriptors per sandbox and per held
#      relay connection. With --engine, sandboxd_engine_bench also measures cold acquires with
#      and without isolation and the relay on the engine (its "isolation" rows).
#   7. sandboxd_egress_bench: the egress proxy beside the same upstreams reached
#      directly (in process, 127.0.0.1): a plain request's p50/p99, a tunnel's time to first
#      byte, a 64 MiB download's throughput and the proxy's CPU per GiB, memory while refusing
#      1,000 requests a second, memory and descriptors per held tunnel (500; 100 with --quick).
#   8. bench/ui_streams.py: serve's CPU at 100 lifecycle events a second with no
#      operator page open and with 50 open (each page's files fetched, its event stream read),
#      acquire latency in both, and every stream checked to have received every event (20 s
#      windows; 5 s with --quick).
#   scripts/bench.sh                   the full run (a few minutes on 2 cores)
#   scripts/bench.sh --quick           fewer iterations, no 10,000-sandbox rows
#   scripts/bench.sh --engine podman   also the engine comparison (10 rounds; 1 with --quick)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
bench="$build_dir/bench/sandboxd_bench"
[ -x "$bench" ] || { echo "bench: $bench does not exist; run scripts/setup.sh first" >&2; exit 2; }
# Each part's header says when it began, so a slow part is found in the log.
section() { echo "== $* (at ${SECONDS} s)"; }
quick=()
probes=1001
rounds=10
paused_seconds=60
engine=""
while (($#)); do
  case "$1" in
    --quick) quick=(--quick); probes=101; rounds=1; paused_seconds=5 ;;
    --engine) engine="${2:?--engine needs podman or docker}"; shift ;;
    *) echo "bench: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done

section "sandboxd_bench ${quick[*]} (rows: $build_dir/bench/rows.jsonl)"
"$bench" "${quick[@]}" --jsonl "$build_dir/bench/rows.jsonl"

section "syscalls per new conversation (strace) and instructions per warm pair (callgrind)"
total_calls() {  # the "total" line of strace -c: calls are its 4th field
  awk '$NF == "total" { print $4 }' "$1"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in 1 "$probes"; do
  left=$(strace -f -c -o "$tmp/strace.$n" "$bench" --only probe_cold --iterations "$n")
  rm -rf "$left"
done
echo "syscalls per new conversation (in-process backend, memory store): $(
  awk -v a="$(total_calls "$tmp/strace.1")" -v b="$(total_calls "$tmp/strace.$probes")" \
    -v n="$probes" 'BEGIN { printf "%.1f", (b - a) / (n - 1) }')"

collected() {  # "==PID== Collected : N" from callgrind's summary
  sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$1"
}
for n in 1 "$probes"; do
  left=$(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out.$n" \
    "$bench" --only probe_warm --iterations "$n" 2>"$tmp/cg.$n")
  rm -rf "$left"
done
echo "instructions per warm acquire+release (callgrind, memory store): $(
  awk -v a="$(collected "$tmp/cg.1")" -v b="$(collected "$tmp/cg.$probes")" -v n="$probes" \
    'BEGIN { printf "%.0f", (b - a) / (n - 1) }')"
fleet_sizes=(0 1000 10000)
# --quick: the pair alone, so the step keeps running (callgrind beside 1,000 others is most of
# this step's time under valgrind); the flatness figures come from the full run.
if ((${#quick[@]})); then fleet_sizes=(0); fi
pairs=200
for others in "${fleet_sizes[@]}"; do
  left=$(valgrind --tool=callgrind --toggle-collect='*measured_warm_pairs*' \
    --callgrind-out-file="$tmp/cg.others.$others" \
    "$bench" --only probe_warm --iterations "$pairs" --others "$others" 2>"$tmp/cg.others.$others.log")
  rm -rf "$left"
  per_pair=$(awk -v c="$(collected "$tmp/cg.others.$others.log")" -v n="$pairs" \
    'BEGIN { printf "%.0f", c / n }')
  [ "$others" = 0 ] && alone=$per_pair
  echo "instructions per warm pair beside $others other active conversations: $per_pair" \
    "($(awk -v a="$per_pair" -v b="$alone" 'BEGIN { printf "%.2f", a / b }')x the pair alone)"
done

kube_fleets=1000,10000
kube_rounds=3
kube_ready_rounds=10
if ((${#quick[@]})); then kube_fleets=1000; kube_rounds=1; kube_ready_rounds=2; fi
section "the kubernetes backend's listing at fleet size (stand-in API server)"
python3 bench/kubernetes_listing.py --sandboxctl "$build_dir/apps/sandboxctl/sandboxctl" \
  --pods "$kube_fleets" --rounds "$kube_rounds"
section "from a pod turning Ready to the acquire returning: a watch beside polling (stand-in)"
python3 bench/kubernetes_readiness.py --sandboxctl "$build_dir/apps/sandboxctl/sandboxctl" \
  --rounds "$kube_ready_rounds"

relay_requests=2000
relay_sandboxes=500
if ((${#quick[@]})); then relay_requests=200; relay_sandboxes=100; fi
section "the relay beside the same sandbox reached directly (in process, 127.0.0.1)"
"$build_dir/bench/sandboxd_relay_bench" --requests "$relay_requests" --echoes "$relay_requests"
section "$relay_sandboxes isolated sandboxes' relays held by one serve (loopback_backend)"
python3 bench/relay_scale.py --sandboxctl "$build_dir/apps/sandboxctl/sandboxctl" \
  --plugin-dir "$build_dir/plugins" --sandboxes "$relay_sandboxes"
section "the egress proxy beside the same upstreams reached directly (in process, 127.0.0.1)"
"$build_dir/bench/sandboxd_egress_bench" --requests "$relay_requests" --tunnels "$relay_sandboxes"
ui_seconds=20
if ((${#quick[@]})); then ui_seconds=5; fi
section "the operator page: 50 open event streams at 100 lifecycle events/s (loopback_backend)"
python3 bench/ui_streams.py --sandboxctl "$build_dir/apps/sandboxctl/sandboxctl" \
  --plugin-dir "$build_dir/plugins" --streams 50 --events-per-second 100 --seconds "$ui_seconds"

if [ -n "$engine" ]; then
  started=0
  scripts/test_engine.sh status "$engine" >/dev/null 2>&1 || started=1
  scripts/test_engine.sh start "$engine"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'; ((started)) && scripts/test_engine.sh stop $engine >/dev/null 2>&1 || true" EXIT
  eval "$(scripts/test_engine.sh env "$engine")"
  section "sandboxd_engine_bench on $engine, $rounds rounds"
  "$build_dir/bench/sandboxd_engine_bench" --socket "unix://$SANDBOXD_TEST_DOCKER_SOCKET" \
    --image "${SANDBOXD_TEST_IMAGE:-localhost/sandboxd-test-sandbox:latest}" --rounds "$rounds" \
    --jsonl "$build_dir/bench/engine_rows.jsonl" --paused-sandboxes 5 --paused-seconds "$paused_seconds"
  section "pre-started slots through sandboxd-provisioner on $engine, $rounds rounds"
  python3 bench/provisioner_slots.py --provisioner "$build_dir/apps/provisioner/sandboxd-provisioner" \
    --socket "$SANDBOXD_TEST_DOCKER_SOCKET" \
    --image "${SANDBOXD_TEST_IMAGE:-localhost/sandboxd-test-sandbox:latest}" --rounds "$rounds"
fi
