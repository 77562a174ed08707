#!/usr/bin/env bash
# Runs the whole test suite with ctest against ./build (made by scripts/setup.sh), then the
# engine-labelled tests ("docker") once more on every other engine, reporting each engine
# separately; a failure on any engine fails the run. Engines: $SANDBOXD_TEST_ENGINES (default
# "podman docker"; Docker needs root, so without it only podman runs). An engine set-up left
# running stays running; one this script started is stopped on the way out, whatever happens.
# Afterwards no container, network or snapshot image of ours may be left that the run created:
# any is named, removed, and fails the run. A Redis for the ownership_redis tests is started the
# same way (scripts/test_redis.sh; SANDBOXD_SKIP_REDIS=1 leaves it out).
#   scripts/test.sh                 all tests, then the engine tests on Docker
#   scripts/test.sh -L ownership    any extra arguments go to every ctest call
#   TEST_JOBS=3 scripts/test.sh     tests at once (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
[ -d "$build_dir" ] || { echo "test: $build_dir does not exist; run scripts/setup.sh first" >&2; exit 2; }

# Two at once by default. Alone on a quiet machine, podman's suite took 401 s at -j3 against
# 657 s at -j2 (its long tests wait on the engine); inside .ci/run, beside the background
# sanitizer builds, -j3 gained 40 s on podman and nothing on Docker, and widened the windows of
# races between gateways enough to show one (since fixed): TEST_JOBS=3 where the CPU is idle.
run_ctest() {
  ctest --test-dir "$build_dir" --output-on-failure --timeout 300 -j"${TEST_JOBS:-2}" "$@"
}

started=()
stop_started() {
  for service in "${started[@]}"; do
    if [ "$service" = redis ]; then
      scripts/test_redis.sh stop || true
    else
      scripts/test_engine.sh stop "$service" || true
    fi
  done
}
trap stop_started EXIT

# The Redis the ownership_redis tests share (they skip without it).
if [ -x scripts/test_redis.sh ] && [ -z "${SANDBOXD_SKIP_REDIS:-}" ]; then
  scripts/test_redis.sh status >/dev/null 2>&1 || started+=(redis)
  scripts/test_redis.sh start
  eval "$(scripts/test_redis.sh env)"
fi

if [ -n "${SANDBOXD_SKIP_ENGINE:-}" ] || [ ! -x scripts/test_engine.sh ]; then
  run_ctest "$@"
  exit
fi

engines="${SANDBOXD_TEST_ENGINES:-podman docker}"
if [ "$(id -u)" -ne 0 ] && [[ " $engines " == *" docker "* ]] &&
   ! scripts/test_engine.sh status docker >/dev/null 2>&1; then
  echo "test: not root, so dockerd cannot be started here; running the engine tests on podman only"
  engines="${engines//docker/}"
fi

# The engine's own CLI on the test engine's socket.
engine_cli() {
  local engine=$1
  shift
  if [ "$engine" = podman ]; then
    podman --url "unix://$SANDBOXD_TEST_DOCKER_SOCKET" "$@"
  else
    docker -H "unix://$SANDBOXD_TEST_DOCKER_SOCKET" "$@"
  fi
}
# Image tags made by snapshots ("{container prefix}-snapshot:{name}-{suffix}").
snapshot_images() {
  engine_cli "$1" images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | grep -- '-snapshot:' || true
}

declare -A result
status=0
first=1
for engine in $engines; do
  echo "== test: engine $engine"
  scripts/test_engine.sh status "$engine" >/dev/null 2>&1 || started+=("$engine")
  if ! scripts/test_engine.sh start "$engine"; then
    result[$engine]="engine did not start"
    status=1
    continue
  fi
  eval "$(scripts/test_engine.sh env "$engine")"
  before="$(scripts/test_engine.sh ours "$engine")"
  images_before="$(snapshot_images "$engine")"
  networks_before="$(scripts/test_engine.sh our-networks "$engine")"
  rc=0
  if ((first)); then
    run_ctest "$@" || rc=$?
    first=0
  else
    run_ctest -L docker "$@" || rc=$?
  fi
  leaked="$(comm -13 <(echo "$before" | sort) <(scripts/test_engine.sh ours "$engine" | sort))"
  if [ -n "$leaked" ]; then
    echo "test: the run left containers of ours on $engine: $(echo "$leaked" | tr '\n' ' ')" >&2
    # shellcheck disable=SC2086
    engine_cli "$engine" rm -f $leaked >/dev/null 2>&1 || true
    rc=1
  else
    echo "test: no container of ours left behind on $engine"
  fi
  left_networks="$(comm -13 <(echo "$networks_before" | sort) \
    <(scripts/test_engine.sh our-networks "$engine" | sort))"
  if [ -n "$left_networks" ]; then
    echo "test: the run left networks of ours on $engine: $(echo "$left_networks" | tr '\n' ' ')" >&2
    for id in $(echo "$left_networks" | cut -d' ' -f1); do
      engine_cli "$engine" network rm "$id" >/dev/null 2>&1 || true
    done
    rc=1
  else
    echo "test: no network of ours left behind on $engine"
  fi
  # A snapshot outlives its sandbox, but not its test: an image a test's snapshot made and
  # left behind is a leak the run would otherwise pile up on the engine.
  left_images="$(comm -13 <(echo "$images_before" | sort) <(snapshot_images "$engine" | sort))"
  if [ -n "$left_images" ]; then
    echo "test: the run left snapshot images on $engine: $(echo "$left_images" | tr '\n' ' ')" >&2
    for image in $left_images; do engine_cli "$engine" rmi -f "$image" >/dev/null 2>&1 || true; done
    rc=1
  else
    echo "test: no snapshot image left behind on $engine"
  fi
  if ((rc)); then result[$engine]="FAILED"; status=1; else result[$engine]="passed"; fi
done

echo "== test: per engine"
for engine in $engines; do echo "  $engine: ${result[$engine]:-not run}"; done
exit "$status"
