#!/usr/bin/env bash
# sandboxctl end to end: plugin listing, check-config on good and bad files, usage errors.
set -u
ctl="$1"
example_dir="$2"
examples="$3"
static_init_dir="$4"
work=$(mktemp -d)
# A sandbox of the example backend outlives the command that made it: none outlives the test.
trap 'pkill -f "$work/" 2>/dev/null; rm -rf "$work"' EXIT
failures=0
passes=0

check() {  # check NAME CONDITION-RESULT DETAIL
  if [ "$2" -eq 0 ]; then passes=$((passes + 1)); else
    failures=$((failures + 1)); echo "FAIL: $1"; echo "$3" | sed 's/^/    /'; fi
}
contains() { grep -qE -- "$2" <<<"$1"; }

# plugins: both stores and the out-of-tree example backend, one line each.
out=$(SANDBOXD_PLUGIN_PATH="$example_dir" "$ctl" plugins 2>&1); rc=$?
check "plugins exits 0" $rc "$out"
for line in 'ownership_memory:MemoryOwnershipStore +ownership +abi=3 +version=[0-9]+\.[0-9]+\.[0-9]+ +/' \
            'ownership_sqlite:SqliteOwnershipStore +ownership +abi=3 +version=[0-9]+\.[0-9]+\.[0-9]+ +/' \
            'process_backend:ProcessSandboxBackend +backend +abi=3 +version=0\.1\.0 +.*process_backend.so'; do
  contains "$out" "$line"; check "plugins lists /$line/" $? "$out"
done
# Each with its description on the line below, as README promises (it was left out of the text).
contains "$out" '^    sandboxes as containers of a local Docker-compatible engine'; check "plugins shows each description" $? "$out"
# Listing reads the libraries' own metadata: a plugin whose static initialiser writes a file is
# listed, and the file never appears (no plugin code runs).
out=$(SANDBOXD_TEST_STATIC_INIT_MARKER="$work/static-init-ran" SANDBOXD_PLUGIN_PATH="$static_init_dir" \
      "$ctl" plugins 2>&1); rc=$?
contains "$out" 'static_init:MarkerBackend +backend +abi=3'; check "plugins lists the static-init plugin" $? "$out"
[ ! -e "$work/static-init-ran" ]; check "listing ran no plugin code" $? "$(cat "$work/static-init-ran" 2>&1)"
out=$(SANDBOXD_PLUGIN_PATH="$example_dir" "$ctl" plugins --json 2>&1)
contains "$out" '"use": "process_backend:ProcessSandboxBackend"'; check "plugins --json" $? "$out"
contains "$out" '"version": "0.1.0"'; check "plugins --json names the example's own version" $? "$out"

# check-config: resolved settings, secrets redacted, plugins constructed.
export SANDBOXCTL_TEST_SECRET="s3cr3t-value-from-env"
cat >"$work/good.json" <<JSON
{"sandbox": {"image": "busybox", "replicas": 2,
  "environment": {"TOKEN": "\$SANDBOXCTL_TEST_SECRET", "PLAIN": "inline-secret"},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/leases.db"}}}
JSON
out=$("$ctl" --config "$work/good.json" check-config 2>&1); rc=$?
check "check-config good exits 0" $rc "$out"
contains "$out" '"TOKEN": "<redacted>"'; check "check-config redacts env" $? "$out"
! contains "$out" 's3cr3t-value-from-env|inline-secret'; check "no secret in output" $? "$out"
contains "$out" 'ownership: ownership_sqlite:SqliteOwnershipStore loaded'; check "store loaded" $? "$out"
contains "$out" 'optional capabilities: pause'; check "check-config names the backend's capabilities" $? "$out"
[ -f "$work/leases.db" ]; check "sqlite file created" $? "$(ls -l "$work")"

cat >"$work/bad.json" <<'JSON'
{"sandbox": {"replicas": -1}}
JSON
out=$("$ctl" --config "$work/bad.json" check-config 2>&1); rc=$?
[ $rc -ne 0 ]; check "bad replicas fails" $? "$out"
contains "$out" "bad.json: sandbox.replicas: .*-1"; check "bad replicas names file, key, value" $? "$out"

cat >"$work/ttl.json" <<'JSON'
{"sandbox": {"ownership": {"use": "ownership_memory:MemoryOwnershipStore", "ttl_multiplier": 1.5}}}
JSON
out=$("$ctl" --config "$work/ttl.json" check-config 2>&1); rc=$?
[ $rc -ne 0 ]; check "plugin-rejected option fails" $? "$out"
contains "$out" "sandbox.ownership.ttl_multiplier"; check "plugin rejection names key path" $? "$out"

cat >"$work/use.json" <<'JSON'
{"sandbox": {"backend": {"use": "ownership_memory:MemoryOwnershipStore"}}}
JSON
out=$("$ctl" --config "$work/use.json" check-config 2>&1); rc=$?
[ $rc -ne 0 ]; check "store as backend fails" $? "$out"
contains "$out" "sandbox.backend.use.*is an ownership store"; check "kind mismatch message" $? "$out"

printf '{"sandbox": {"replicas": 2,,}}' >"$work/malformed.json"
out=$("$ctl" --config "$work/malformed.json" check-config 2>&1); rc=$?
[ $rc -ne 0 ]; check "malformed JSON fails" $? "$out"
contains "$out" "line 1"; check "malformed JSON reports the line" $? "$out"

# DeerFlow's config.yaml as is; the id of a conversation, and an older DeerFlow's.
cat >"$work/config.yaml" <<'YAML'
models:
  - name: gpt-4
    api_key: $SANDBOXD_TEST_NEVER_SET
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  image: busybox
  replicas: 2
  teardown_wait_seconds: 45
YAML
out=$("$ctl" --config "$work/config.yaml" check-config --user alice --thread t-1 2>&1); rc=$?
[ $rc -eq 0 ]; check "check-config reads a DeerFlow config.yaml" $? "$out"
contains "$out" "read as DeerFlow's config.yaml"; check "check-config shows the YAML mapping" $? "$out"
contains "$out" '"teardown_wait_seconds": 45'; check "check-config shows the teardown wait" $? "$out"
! contains "$out" "SANDBOXD_TEST_NEVER_SET"; check "DeerFlow's own sections raise no warning" $? "$out"
want=$(python3 -c 'import hashlib; print(hashlib.sha256(b"mount-v2:alice:t-1").hexdigest()[:16])')
old=$(python3 -c 'import hashlib; print(hashlib.sha256(b"alice:t-1").hexdigest()[:16])')
contains "$out" "sandbox id $want .*gives $old"; check "check-config prints both ids of (alice, t-1)" $? "$out"
out=$("$ctl" --config "$work/config.yaml" check-config --user alice --thread t-1 --json 2>/dev/null)
python3 -c 'import json,sys; c=json.loads(sys.argv[1])["conversation"]; assert c["sandbox_id"]==sys.argv[2] and c["older_deerflow_sandbox_id"]==sys.argv[3]' "$out" "$want" "$old"
check "check-config --json carries the conversation's ids" $? "$out"
out=$("$ctl" --config "$work/config.yaml" check-config --user alice 2>&1); rc=$?
[ $rc -eq 3 ] || [ $rc -eq 2 ]; check "--user without --thread is refused" $? "rc=$rc $out"
printf 'sandbox:\n  replicas: many\n' >"$work/bad.yaml"
out=$("$ctl" --config "$work/bad.yaml" check-config 2>&1); rc=$?
[ $rc -eq 3 ] && contains "$out" "bad.yaml:2: sandbox.replicas: expected an integer > 0"
check "a YAML error names the file, line and key" $? "rc=$rc $out"

out=$("$ctl" frobnicate 2>&1); rc=$?
[ $rc -eq 2 ]; check "unknown command exits 2" $? "$out"
out=$(XDG_STATE_HOME="$work/xdg" "$ctl" check-config 2>&1); rc=$?
[ $rc -eq 0 ] && contains "$out" '"source_file": "<built-in default>"' &&
  contains "$out" "\"base_dir\": \"$work/xdg/sandboxd\""
check "check-config without --config prints the built-in default" $? "$out"
out=$(XDG_STATE_HOME="$work/xdg" "$ctl" check-config --json 2>&1); rc=$?
[ $rc -eq 0 ] && python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["ownership"].startswith("ownership_sqlite")' "$out"
check "check-config --json is one document" $? "$out"
usage=$("$ctl" --help 2>&1)
for command in acquire release destroy get list reconcile reap plugins check-config; do
  contains "$usage" "^  $command "; check "--help lists $command" $? "$usage"
  out=$("$ctl" "$command" --help 2>&1); rc=$?
  [ $rc -eq 0 ] && contains "$out" "Example:" && contains "$out" "--json"
  check "$command --help has an example and --json" $? "$out"
done
out=$("$ctl" --help 2>&1); rc=$?
[ $rc -eq 0 ] && contains "$out" "check-config"; check "--help" $? "$out"

# Every example config in examples/configs parses and its plugins construct.
for example in "$examples"/*.json; do
  sed -e "s#/var/lib/sandboxd#$work/example-state#g" -e "s#/tmp/deer-flow#$work/example-state#g" \
    "$example" >"$work/example.json"
  mkdir -p "$work/example-state"
  out=$(MY_API_KEY=k PROVISIONER_API_KEY=k "$ctl" --config "$work/example.json" check-config 2>&1)
  check "check-config $(basename "$example")" $? "$out"
  if grep -q remote_provisioner "$example"; then
    contains "$out" 'optional capabilities: mount_contract_negotiation'
    check "check-config $(basename "$example") names the negotiation capability" $? "$out"
  fi
done

# A third-party backend through the one-shot CLI, each command its own process: the example's
# sandbox outlives `acquire`, the printed URL answers, and the next acquire of the conversation
# after a release finds the same sandbox (reclaimed), until destroy stops it.
mkdir -m 700 "$work/example-cli"
cat >"$work/example-cli.json" <<JSON
{"sandbox": {"plugin_dirs": ["$example_dir"], "base_dir": "$work/example-cli",
  "backend": {"use": "process_backend:ProcessSandboxBackend", "work_dir": "$work/example-cli/sandboxes"}}}
JSON
example_ctl() { "$ctl" --config "$work/example-cli.json" "$@"; }
out=$(example_ctl acquire --user alice --thread t-1 --json 2>&1); rc=$?
check "example: acquire exits 0" $rc "$out"
id=$(sed -n 's/.*"sandbox_id": *"\([^"]*\)".*/\1/p' <<<"$out" | head -1)
url=$(sed -n 's/.*"sandbox_url": *"\([^"]*\)".*/\1/p' <<<"$out" | head -1)
contains "$out" '"path": "created"'; check "example: the first acquire creates" $? "$out"
answer=$(curl -sf --max-time 5 "$url/v1/sandbox" 2>&1); rc=$?
check "example: the sandbox answers after acquire returned" $rc "$url: $answer"
out=$(example_ctl release "$id" 2>&1); check "example: release exits 0" $? "$out"
out=$(example_ctl acquire --user alice --thread t-1 --json 2>&1); rc=$?
contains "$out" "\"sandbox_id\": \"$id\"" && contains "$out" '"path": "reclaimed"'
check "example: the next acquire reclaims the same sandbox" $? "$out"
out=$(example_ctl destroy "$id" 2>&1); check "example: destroy exits 0" $? "$out"
! curl -sf --max-time 2 "$url/v1/sandbox" >/dev/null 2>&1; check "example: destroy stopped it" $? "$url"
out=$(example_ctl list --json 2>&1)
! contains "$out" "$id"; check "example: nothing listed after destroy" $? "$out"

echo "sandboxctl: $passes passed, $failures failed"
[ $failures -eq 0 ]
