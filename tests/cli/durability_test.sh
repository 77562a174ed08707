#!/usr/bin/env bash
# Issue 32 B: a file renamed into place is durable only once its directory is (the rename lives
# in the directory's entry). Checked from outside with strace: after the rename that puts the
# registry (sandboxctl, over the example process backend) and a slot's claim record
# (local_docker, on the engine) into place, the directory holding it is fsync'ed.
#   durability_test.sh SANDBOXCTL EXAMPLE_PLUGIN_DIR [LOCAL_DOCKER_TEST]
# The claim record part needs the engine and is skipped (said so) without one.
set -u
ctl="$1"
plugin_dir="$2"
local_docker_test="${3:-}"
command -v strace >/dev/null || { echo "durability: strace is not installed (scripts/setup.sh installs it)"; exit 1; }
# Under strace (ptrace) LeakSanitizer cannot run and aborts the traced process: in the
# AddressSanitizer build (scripts/asan.sh) its leak check is off here; every other test keeps it.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
work=$(mktemp -d)
# A sandbox of the example backend outlives the command that made it: none outlives the test.
trap 'pkill -f "$work/" 2>/dev/null; rm -rf "$work"' EXIT
failures=0

# Whether, in strace output `trace`, a rename onto a path ending in `name` is followed by an
# fsync of a descriptor strace resolves (-y) to directory `dir`.
renamed_then_dir_synced() {
  local trace="$1" name="$2" dir="$3"
  python3 - "$trace" "$name" "$dir" <<'PY'
import re, sys
trace, name, directory = sys.argv[1:]
lines = open(trace).read().splitlines()
renamed = None
for i, line in enumerate(lines):
    if re.search(r'\brename(at2?)?\(', line) and re.search(re.escape(name) + r'[">]', line) and ' = 0' in line:
        renamed = i
if renamed is None:
    print(f"no rename onto {name} in the trace"); sys.exit(1)
for line in lines[renamed + 1:]:
    if re.search(r'\bfsync\(\d+<' + re.escape(directory) + r'>\) = 0', line):
        print(f"rename onto {name}, then fsync of {directory}"); sys.exit(0)
print(f"rename onto {name} was not followed by an fsync of {directory}:")
print("\n".join(lines[renamed:renamed + 8])); sys.exit(1)
PY
}

# 1. The registry a sandboxctl command writes back.
mkdir -m 700 "$work/state"
cat >"$work/cfg.json" <<JSON
{"sandbox": {"backend": {"use": "process_backend:ProcessSandboxBackend", "work_dir": "$work/sandboxes"},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/leases.db"},
  "base_dir": "$work/state", "plugin_dirs": ["$plugin_dir"]}}
JSON
# -b execve: the sandbox's own process (a child that outlives the command, as a container
# would) is left untraced, so strace returns when sandboxctl does.
strace -f -b execve -y -qq -e trace=fsync,rename,renameat,renameat2 -o "$work/registry.trace" \
  "$ctl" --config "$work/cfg.json" acquire --user alice --thread t-1 >"$work/acquire.out" 2>&1 ||
  { echo "durability: acquire failed:"; cat "$work/acquire.out"; exit 1; }
if renamed_then_dir_synced "$work/registry.trace" "sandboxctl-registry.json" "$(realpath "$work/state")"; then
  echo "durability: registry: ok"
else
  echo "durability: registry: FAILED"; failures=$((failures + 1))
fi
id=$(sed -n 's/^sandbox_id: *//p' "$work/acquire.out")
"$ctl" --config "$work/cfg.json" destroy "$id" >/dev/null 2>&1

# 2. A claimed slot's record, written by local_docker's slot pool on the engine.
if [ -z "${SANDBOXD_TEST_DOCKER_SOCKET:-}" ] || [ -z "$local_docker_test" ]; then
  echo "durability: claim record: skipped (no engine: SANDBOXD_TEST_DOCKER_SOCKET is not set)"
else
  strace -f -y -qq -e trace=fsync,rename,renameat,renameat2 -o "$work/claim.trace" \
    "$local_docker_test" --gtest_filter='WarmSlotsTest.AClaimedSlotIsTheConversationsSandboxWithItsOwnMounts' \
    >"$work/claim.out" 2>&1 || { echo "durability: the claim test failed:"; tail -30 "$work/claim.out"; exit 1; }
  claims_dir=$(grep -o '/tmp/[^ <>"]*-slots/claims' "$work/claim.trace" | head -1)
  if [ -n "$claims_dir" ] && renamed_then_dir_synced "$work/claim.trace" "slotalice.json" "$claims_dir"; then
    echo "durability: claim record: ok"
  else
    echo "durability: claim record: FAILED"; failures=$((failures + 1))
  fi
fi
exit $((failures > 0))
