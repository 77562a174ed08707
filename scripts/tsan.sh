#!/usr/bin/env bash
# Builds only the concurrency-heavy test targets with ThreadSanitizer into ./build-tsan and runs
# them (the loader, the ownership stores with the cross-process tests, the provider core, the
# provisioner service's routes over its HTTP worker threads, the relay, and the egress proxy
# and its decisions: label "proxy"), and the doors' event streams.
# Container-engine tests are left to the normal run.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(loader_test ownership_store_test ownership_cross_process_test ownership_contender
         ownership_memory ownership_sqlite ownership_redis)
[ -f tests/provider/CMakeLists.txt ] && targets+=(provider_test)
targets+=(provisioner_service_test provisioner_config_test relay_test egress_proxy_test egress_decisions_test
          door_event_stream_test)
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSANDBOXD_WERROR=ON -DSANDBOXD_SANITIZER=thread >/dev/null
cmake --build build-tsan -j"$(nproc)" --target "${targets[@]}"
# --build-only: .ci/run builds while other stages run, and runs later.
if [ "${1:-}" = --build-only ]; then exit 0; fi
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
SANDBOXD_SKIP_ENGINE=1 BUILD_DIR=build-tsan bash scripts/test.sh -L "loader|ownership|provider|provisioner_service|proxy"
# Once more on a single CPU: there a worker thread tends to run on after the thread it served
# has moved on, the interleaving that hid a race on two cores (a backend error's exception freed
# by the worker while the HTTP thread still read it; 19 of 20 one-CPU runs caught it).
echo "tsan: the doors' event streams (a server thread, subscribers, an event log written by others)"
build-tsan/tests/door/door_event_stream_test --gtest_brief=1
if command -v taskset >/dev/null; then
  echo "tsan: provisioner_service_test on one CPU"
  taskset -c 0 build-tsan/tests/provisioner/provisioner_service_test --gtest_brief=1
fi
