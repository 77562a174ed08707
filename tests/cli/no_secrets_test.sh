#!/usr/bin/env bash
# No secret in any line, across whole runs of real processes (issue 13 D): a local gateway whose
# sandbox environment holds a secret, and a gateway on sandboxd-provisioner with an API key and
# credentials in the provisioner URL, each driven through check-config, acquire, list, release
# and destroy at --log-level debug, plus requests with a wrong key. Every line on every
# stdout and stderr (and the service's log) is searched for each secret value.
set -u
ctl="$1"
provisioner="$2"
# shellcheck source=engine_lib.sh
source "$(dirname "$0")/engine_lib.sh"
require_engine
work=$(mktemp -d)
prefix="nosecret-$$"
service_pid=""
cleanup() {
  [ -n "$service_pid" ] && kill "$service_pid" 2>/dev/null && wait "$service_pid" 2>/dev/null
  remove_our_containers
  rm -rf "$work"
}
trap cleanup EXIT
export ENV_SECRET="env-secret-7f3a9c41"
export PROVISIONER_API_KEY="key-secret-51be02d8"
url_secret="url-secret-2c9d6e17"
wrong_key="wrong-secret-99ab3f"
log="$work/all.log"
run() {  # every line of a command, both streams, into the one log (the command line itself is
  # the test's, not the product's, so only its first two words are noted)
  echo "\$ $1 ${2:-}" >>"$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  printf '\nexit %d\n' "$rc" >>"$log"
}

# 1. A local gateway: the sandbox's environment carries a secret from the process environment.
cat >"$work/local.json" <<JSON
{"sandbox": {"backend": {"use": "local_docker:LocalContainerBackend", "image": "$image",
  "socket": "unix://$socket", "container_prefix": "$prefix",
  "environment": {"TOKEN": "\$ENV_SECRET", "PLAIN": "$ENV_SECRET"}},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/leases.db"},
  "base_dir": "$work/local-state"}}
JSON
run "$ctl" --config "$work/local.json" --log-level debug check-config
run "$ctl" --config "$work/local.json" --log-level debug acquire --user alice --thread t-1
id=$(sed -n 's/^sandbox_id: *//p' "$log" | tail -1)
run "$ctl" --config "$work/local.json" --log-level debug --json list
run "$ctl" --config "$work/local.json" --log-level debug release "$id"
run "$ctl" --config "$work/local.json" --log-level debug destroy "$id"

# 2. A gateway on sandboxd-provisioner: API key, and credentials in the provisioner URL.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/provisioner.json" <<JSON
{"provisioner": {"host_base_dir": "$work/state",
  "backend": {"use": "local_docker:LocalContainerBackend", "image": "$image",
              "socket": "unix://$socket", "container_prefix": "$prefix",
              "environment": {"TOKEN": "$ENV_SECRET"}}}}
JSON
"$provisioner" --config "$work/provisioner.json" --log-level debug --listen "127.0.0.1:$port" \
  >"$work/service.out" 2>"$work/service.log" &
service_pid=$!
for _ in $(seq 100); do grep -q listening "$work/service.out" 2>/dev/null && break; sleep 0.1; done
cat >"$work/remote.json" <<JSON
{"sandbox": {"backend": {"use": "remote_provisioner:RemoteSandboxBackend",
  "provisioner_url": "http://gateway:$url_secret@127.0.0.1:$port",
  "provisioner_api_key": "\$PROVISIONER_API_KEY"},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/remote-leases.db"},
  "base_dir": "$work/state"}}
JSON
run "$ctl" --config "$work/remote.json" --log-level debug check-config
run "$ctl" --config "$work/remote.json" --log-level debug acquire --user bob --thread t-2
rid=$(sed -n 's/^sandbox_id: *//p' "$log" | tail -1)
run "$ctl" --config "$work/remote.json" --log-level debug --json list
run "$ctl" --config "$work/remote.json" --log-level debug release "$rid"
run "$ctl" --config "$work/remote.json" --log-level debug destroy "$rid"
run curl -s -H "X-API-Key: $wrong_key" "http://127.0.0.1:$port/api/sandboxes"
sed "s#$PROVISIONER_API_KEY#<the-right-key>#" "$work/remote.json" >"$work/wrong.json"
sed -i "s#\\\$PROVISIONER_API_KEY#$wrong_key#" "$work/wrong.json"
run "$ctl" --config "$work/wrong.json" --log-level debug acquire --user bob --thread t-3
kill "$service_pid"
wait "$service_pid"
service_pid=""
cat "$work/service.out" "$work/service.log" >>"$log"

failures=0
lines=$(wc -l <"$log")
for secret in "$ENV_SECRET" "$PROVISIONER_API_KEY" "$url_secret" "$wrong_key"; do
  found=$(grep -c -F -- "$secret" "$log")
  echo "secret ${secret%%-*}-…: $found of $lines lines"
  if [ "$found" -ne 0 ]; then
    grep -n -F -- "$secret" "$log" | head -5
    failures=$((failures + 1))
  fi
done
# The run must have done what it says, or an empty log would pass.
for expected in "exit 0" "result:       destroyed" "provisioner auth rejected" "Created sandbox"; do
  grep -q -F -- "$expected" "$log" || { echo "missing from the run: $expected"; failures=$((failures + 1)); }
done
# 11 commands succeed; the acquire with the wrong key fails (exit 4), as it must.
[ "$(grep -c '^exit 0' "$log")" -eq 11 ] && grep -q '^exit 4' "$log" ||
  { echo "the commands did not end as expected"; cat "$log"; failures=$((failures + 1)); }
echo "no-secrets: $lines lines scanned, $failures problem(s)"
[ $failures -eq 0 ]
