#!/usr/bin/env bash
# sandboxd-backend-conformance run as a plugin author runs it, over one backend:
#   kit_test.sh KIT example PLUGIN_FILE       the example backend (examples/third_party_backend)
#   kit_test.sh KIT local_docker              the local engine (scripts/test.sh starts it)
#   kit_test.sh KIT remote_provisioner PROVISIONER   the gateway's backend against the real
#                                             sandboxd-provisioner, on the local engine
#   kit_test.sh KIT forgetful PLUGIN_FILE     a backend that breaks the contract on purpose:
#                                             the kit must fail, naming each broken rule
#   kit_test.sh KIT flags                     the kit's own flags: help, errors, exit codes
set -uo pipefail
kit="$1"
what="$2"
plugin="${3:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check NAME STATUS [DETAIL]
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; [ -z "${3:-}" ] || echo "$3"; failures=$((failures + 1)); fi
}

case "$what" in
  example)
    "$kit" --plugin "$plugin" --use process_backend:ProcessSandboxBackend >"$work/out" 2>&1
    rc=$?
    [ "$rc" -eq 0 ]; check "the example backend holds every rule (exit $rc)" $? "$(cat "$work/out")"
    grep -q "Every rule held" "$work/out"; check "the kit says so" $? ""
    ;;
  local_docker)
    socket="${SANDBOXD_TEST_DOCKER_SOCKET:-}"
    if [ -z "$socket" ] || [ ! -S "$socket" ]; then
      echo "SKIP: SANDBOXD_TEST_DOCKER_SOCKET is not a socket (scripts/test.sh starts the engine)"
      exit 0
    fi
    cat >"$work/config.json" <<JSON
{"sandbox": {"backend": {"use": "local_docker:LocalContainerBackend",
                         "socket": "unix://$socket",
                         "image": "${SANDBOXD_TEST_IMAGE:-localhost/sandboxd-test-sandbox:latest}",
                         "container_prefix": "sandboxd-kit"}}}
JSON
    "$kit" --config "$work/config.json" >"$work/out" 2>&1
    rc=$?
    [ "$rc" -eq 0 ]; check "local_docker holds every rule on this engine (exit $rc)" $? "$(cat "$work/out")"
    grep -q "OptionalVerbs.PauseAndUnpauseKeepTheSandbox" "$work/out" &&
      ! grep -q "SandboxPausing not offered" "$work/out"
    check "its optional pause verb was checked, not skipped" $? ""
    ;;
  remote_provisioner)
    # The gateway's backend against the real sandboxd-provisioner, itself on the local engine.
    provisioner="$plugin"
    socket="${SANDBOXD_TEST_DOCKER_SOCKET:-}"
    if [ -z "$socket" ] || [ ! -S "$socket" ]; then
      echo "SKIP: SANDBOXD_TEST_DOCKER_SOCKET is not a socket (scripts/test.sh starts the engine)"
      exit 0
    fi
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$work/state"  # the gateway's state directory is the provisioner's host base, as deployed
    cat >"$work/provisioner.json" <<JSON
{"provisioner": {"api_key": "kit-key", "host_base_dir": "$work/state",
                 "backend": {"use": "local_docker:LocalContainerBackend",
                             "socket": "unix://$socket",
                             "image": "${SANDBOXD_TEST_IMAGE:-localhost/sandboxd-test-sandbox:latest}",
                             "container_prefix": "sandboxd-kit-remote"}}}
JSON
    "$provisioner" --config "$work/provisioner.json" --listen "127.0.0.1:$port" \
      >"$work/provisioner.out" 2>&1 &
    provisioner_pid=$!
    trap 'kill "$provisioner_pid" 2>/dev/null; wait "$provisioner_pid" 2>/dev/null; rm -rf "$work"' EXIT
    for _ in $(seq 100); do grep -q listening "$work/provisioner.out" && break; sleep 0.1; done
    cat >"$work/config.json" <<JSON
{"sandbox": {"backend": {"use": "remote_provisioner:RemoteSandboxBackend",
                         "provisioner_url": "http://127.0.0.1:$port",
                         "provisioner_api_key": "kit-key"}}}
JSON
    "$kit" --config "$work/config.json" --state-dir "$work/state" >"$work/out" 2>&1
    rc=$?
    [ "$rc" -eq 0 ]; check "remote_provisioner over sandboxd-provisioner holds every rule (exit $rc)" $? \
      "$(cat "$work/out"; echo "-- provisioner:"; tail -20 "$work/provisioner.out")"
    ;;
  forgetful)
    "$kit" --plugin "$plugin" --use forgetful_backend:ForgetfulBackend --destroy-seconds 5 \
      >"$work/out" 2>&1
    rc=$?
    [ "$rc" -eq 1 ]; check "a backend breaking the contract fails the kit (exit $rc, want 1)" $? "$(cat "$work/out")"
    for rule in AnotherProcess.DiscoversItListsItAndSeesItAlive \
                Create.TheInfoCarriesTheRequestsIdentity \
                StaleInfo.AnotherProcessDestroysIt \
                Destroy.StopsTheSandboxUnderTheDaemonsSignalMask; do
      grep -q "^\[  FAILED  \] $rule" "$work/out"; check "names the broken rule $rule" $? ""
    done
    for rule in Create.TheSandboxAnswersAtItsUrl Create.AgainForARunningIdReturnsThatSandbox \
                Discover.AnIdNobodyRunsAnswersNothing; do
      grep -q "^\[       OK \] $rule" "$work/out"; check "passes the rule it keeps: $rule" $? ""
    done
    grep -q "Why it matters: one sandboxctl command is one process" "$work/out"
    check "says why the cross-process rule matters" $? ""
    grep -q "set_child_signal_defaults" "$work/out"; check "names the SDK's fix for the signal mask" $? ""
    sleep 0.5
    ! pgrep -f "$work" >/dev/null; check "nothing of the run is left running" $? "$(pgrep -af "$work")"
    ;;
  flags)
    "$kit" --help >"$work/out" 2>&1
    [ $? -eq 0 ] && grep -q -- "--use module:Class" "$work/out"; check "--help exits 0 and shows the flags" $? ""
    "$kit" >"$work/out" 2>&1
    [ $? -eq 2 ] && grep -q "name the backend with --use" "$work/out"; check "no backend: exit 2, says what to give" $? "$(cat "$work/out")"
    "$kit" --use nowhere_backend:Nope >"$work/out" 2>&1
    [ $? -eq 2 ] && grep -q "the plugin did not load: .*nowhere_backend" "$work/out"
    check "an unknown module: exit 2 naming it" $? "$(cat "$work/out")"
    "$kit" --use x:Y --ready-seconds soon >"$work/out" 2>&1
    [ $? -eq 2 ] && grep -q -- "--ready-seconds soon: expected seconds" "$work/out"
    check "a bad number: exit 2 naming flag and value" $? "$(cat "$work/out")"
    ;;
  *) echo "unknown mode $what"; exit 2 ;;
esac
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
