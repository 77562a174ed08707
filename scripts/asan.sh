#!/usr/bin/env bash
# Builds the whole project with AddressSanitizer + UndefinedBehaviorSanitizer into ./build-asan
# and runs the whole suite against it (podman only: the Docker pass of the normal run adds no
# memory coverage). Any report aborts the test that triggered it, so it fails the run.
# Left out: the out-of-tree SDK consumer tests (label "example"), which build a plugin and a host
# without the sanitizer runtime against this build's libraries.
#   scripts/asan.sh                 build, then the whole suite
#   scripts/asan.sh -R Provider     any extra arguments go to every ctest call
#   scripts/asan.sh --build-only    build only (.ci/run builds while other stages run)
# The build is clang's, unoptimised (scripts/configure_asan.sh says why); UBSan's object-size
# check needs optimisation and is the one check this gives up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/configure_asan.sh
cmake --build build-asan -j"$(nproc)"
if [ "${1:-}" = --build-only ]; then exit 0; fi
# detect_leaks: every test binary ends with nothing of ours left allocated; plugins are
# unloaded by Boost.DLL, so their frames stay symbolised only with fast_unwind off.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/fuzz/ubsan.supp"
SANDBOXD_TEST_ENGINES=podman BUILD_DIR=build-asan bash scripts/test.sh -LE example "$@"
