#!/usr/bin/env bash
# Runs the out-of-tree embedding gateway (built by example_embedding.build_out_of_tree against
# the installed core) over the example process_backend plugin, then builds the same program
# with pkg-config alone and runs that too. Each run must acquire a sandbox that answers
# /v1/sandbox, release it and shut down with nothing left.
set -u
built="$1"/embedding_gateway
prefix="$2"
plugin_dir="$3"
source="$4"
cxx="$5"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

cat >"$work/sandboxd.json" <<JSON
{"sandbox": {"backend": {"use": "process_backend:ProcessSandboxBackend", "work_dir": "$work/sandboxes"},
  "ownership": {"use": "ownership_memory:MemoryOwnershipStore"},
  "base_dir": "$work/state", "plugin_dirs": ["$plugin_dir", "$prefix/lib/sandboxd/plugins"]}}
JSON

run() {  # run NAME BINARY
  local out
  out=$("$2" "$work/sandboxd.json" alice t-1 2>"$work/stderr")
  local rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^sandbox_id ' <<<"$out" || ! grep -q '^released; 1 warm$' <<<"$out" ||
     ! grep -q '^shut down; 0 active, 0 warm$' <<<"$out"; then
    echo "FAIL: $1 (rc $rc)"; echo "$out"; cat "$work/stderr"; failures=$((failures + 1)); return
  fi
  if pgrep -f "$work/sandboxes" >/dev/null; then
    echo "FAIL: $1 left a sandbox process running"; failures=$((failures + 1))
  fi
  echo "ok: $1: $(head -n1 <<<"$out")"
}

run "CMake package build" "$built"
ldd "$built" | grep -q "$prefix/lib/libsandboxd_core.so" || {
  echo "FAIL: $built does not use the installed core:"; ldd "$built"; failures=$((failures + 1)); }

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs sandboxd-core) || { echo "FAIL: pkg-config sandboxd-core"; exit 1; }
# shellcheck disable=SC2086
"$cxx" -Wall -Wextra -Werror -o "$work/embedding_pc" "$source" $flags || {
  echo "FAIL: building with pkg-config flags: $flags"; exit 1; }
run "pkg-config build" "$work/embedding_pc"

echo "embedding: $((2 - failures)) passed, $failures failed"
[ $failures -eq 0 ]
