#!/usr/bin/env bash
# Runs the whole test suite with ctest against ./build (made by scripts/setup.sh). Starts the
# podman test engine (Docker-compatible API on a private socket) for the container tests and
# stops it on the way out, whatever happens.
#   scripts/test.sh                 all tests
#   scripts/test.sh -L ownership    any extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
[ -d "$build_dir" ] || { echo "test: $build_dir does not exist; run scripts/setup.sh first" >&2; exit 2; }

if [ -x scripts/test_engine.sh ] && [ -z "${SANDBOXD_SKIP_ENGINE:-}" ]; then
  scripts/test_engine.sh start
  trap 'scripts/test_engine.sh stop' EXIT
  eval "$(scripts/test_engine.sh env)"
fi

ctest --test-dir "$build_dir" --output-on-failure --timeout 300 -j"${TEST_JOBS:-2}" "$@"
