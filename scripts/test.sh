#!/usr/bin/env bash
# Runs the whole test suite with ctest against ./build (made by scripts/setup.sh). The container
# tests run against the local podman engine (Docker-compatible API on a private socket): an
# engine scripts/setup.sh left running stays running; one this script had to start is stopped
# on the way out, whatever happens. Afterwards no container of ours may be left that the run
# created: any is named, removed, and fails the run.
#   scripts/test.sh                 all tests
#   scripts/test.sh -L ownership    any extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
[ -d "$build_dir" ] || { echo "test: $build_dir does not exist; run scripts/setup.sh first" >&2; exit 2; }

engine=""
if [ -x scripts/test_engine.sh ] && [ -z "${SANDBOXD_SKIP_ENGINE:-}" ]; then
  engine=1
  if ! scripts/test_engine.sh status >/dev/null 2>&1; then
    trap 'scripts/test_engine.sh stop' EXIT
  fi
  scripts/test_engine.sh start
  eval "$(scripts/test_engine.sh env)"
  before="$(scripts/test_engine.sh ours)"
fi

status=0
ctest --test-dir "$build_dir" --output-on-failure --timeout 300 -j"${TEST_JOBS:-2}" "$@" || status=$?

if [ -n "$engine" ]; then
  leaked="$(comm -13 <(echo "$before" | sort) <(scripts/test_engine.sh ours | sort))"
  if [ -n "$leaked" ]; then
    echo "test: the run left containers of ours behind: $(echo "$leaked" | tr '\n' ' ')" >&2
    # shellcheck disable=SC2086
    podman --url "unix://$SANDBOXD_TEST_DOCKER_SOCKET" rm -f -t 1 $leaked >/dev/null 2>&1 || true
    status=1
  else
    echo "test: no container of ours left behind by the run"
  fi
fi
exit "$status"
