#!/usr/bin/env bash
# Configures ./build-asan: the whole project, tests and libFuzzer targets, built by clang with
# AddressSanitizer + UndefinedBehaviorSanitizer. scripts/asan.sh runs the suite from it and
# scripts/fuzz.sh the fuzz targets, so CI compiles the sources once for both.
# clang, not GCC: it builds this tree in about two thirds of GCC's time with the sanitizers on
# (GCC's UBSan instrumentation made the Asio-heavy sources the longest stage of CI), and it is
# the compiler libFuzzer needs anyway. Unoptimised (-O0): the suite mostly waits on engines and
# sockets. pointer-overflow stays recoverable so the one RapidJSON finding can be suppressed by
# file (tests/fuzz/ubsan.supp); halt_on_error still stops on every report not suppressed.
# clang also checks the lock annotations here (-Wthread-safety, an error with -Werror), so this
# build is CI's lock-rule check of every source; the configure step fails if that flag is off.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DSANDBOXD_WERROR=ON \
  -DSANDBOXD_FUZZ=ON -DSANDBOXD_SANITIZER="address,undefined" \
  -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=undefined -fsanitize-recover=pointer-overflow -O0" \
  >/dev/null
grep -q -- "-Wthread-safety" build-asan/compile_commands.json ||
  { echo "configure_asan: the clang build does not check the lock rules (SANDBOXD_THREAD_SAFETY is off)" >&2; exit 1; }
