#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, ASan and UBSan into ./build-asan (the tree
# scripts/asan.sh runs the suite from; scripts/configure_asan.sh) and runs each for a
# bounded time (FUZZ_SECONDS, default 15) from its seed corpus in tests/fuzz/corpus/<target>,
# on a scratch copy, so the repository's corpora only change by hand. A crash, leak, sanitizer
# report or timeout fails the run and leaves the input in build-asan/findings/<target>/; turn
# each into a regression test (and a corpus file) before fixing it. Targets run one per CPU at
# a time.
#   scripts/fuzz.sh                      every target, 15 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh config
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-15}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] ||
  targets=(config plugin_config engine_strings engine_answers provisioner_answers ids_and_paths
           plugin_metadata deerflow_yaml relay_answers)
bash scripts/configure_asan.sh
cmake --build build-asan -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1"
# pointer-overflow stays recoverable so the one RapidJSON finding can be suppressed by file;
# halt_on_error still stops on every report that is not suppressed.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/fuzz/ubsan.supp"
# One target per CPU at a time: each is single-threaded, so a two-CPU machine fuzzes two at once
# in the time of one. Each target's result goes to build-asan/<target>.result, shown in order.
fuzz_one() {
  local target=$1 scratch="build-asan/corpus/$1" findings="build-asan/findings/$1"
  rm -f "build-asan/$target.result"  # an earlier run's result never stands in for this one's
  rm -rf "$scratch" && mkdir -p "$scratch" "$findings"
  cp tests/fuzz/corpus/"$target"/* "$scratch"/
  if build-asan/tests/fuzz/fuzz_"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 "$scratch" \
    >"build-asan/$target.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "build-asan/$target.log")
    cov=$(grep -o 'cov: [0-9]*' "build-asan/$target.log" | tail -1)
    echo "fuzz: $target: ${runs:-?} inputs in ${seconds}s, $cov, no finding" >"build-asan/$target.result"
  else
    { echo "fuzz: $target: FINDING (log build-asan/$target.log, input in $findings/)"
      tail -40 "build-asan/$target.log"; } >"build-asan/$target.result"
    return 1
  fi
}
jobs_at_once="$(nproc)"
running=0
failed=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs_at_once" ]; then
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=$((failed + 1))
  running=$((running - 1))
done
for target in "${targets[@]}"; do
  cat "build-asan/$target.result" 2>/dev/null || echo "fuzz: $target: no result (its set-up failed)"
done
[ "$failed" -eq 0 ]
