#!/usr/bin/env bash
# The lock rules the compiler checks (issue 21): every core and door source, and the provider
# tests' fixtures, parsed by clang with -Wthread-safety -Werror (-fsyntax-only: no object is
# built, so the pass takes seconds). The flags come from ./build's compile_commands.json
# (scripts/setup.sh makes it), with gcc swapped for clang++.
#   scripts/thread_safety.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
[ -f "$build_dir/compile_commands.json" ] ||
  { echo "thread_safety: $build_dir/compile_commands.json is missing; run scripts/setup.sh" >&2; exit 2; }
command -v clang++ >/dev/null || { echo "thread_safety: clang++ is missing (scripts/setup.sh installs clang)" >&2; exit 2; }
python3 - "$build_dir/compile_commands.json" <<'PY'
import json, os, shlex, subprocess, sys
entries = json.load(open(sys.argv[1]))
wanted = ("/core/src/", "/apps/door/", "/tests/provider/provider_seed_test.cpp")
failed = 0
checked = 0
for entry in entries:
    path = entry["file"]
    if not any(part in path for part in wanted):
        continue
    args = shlex.split(entry["command"])
    out = []
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-c"):
            skip = arg == "-o"
            continue
        if arg.startswith("-fsanitize") or arg == "-Wno-maybe-uninitialized":
            continue
        out.append(arg)
    command = ["clang++", *out, "-fsyntax-only", "-Wthread-safety", "-Werror",
               "-Wno-ambiguous-reversed-operator", "-Wno-unknown-warning-option"]
    done = subprocess.run(command, cwd=entry["directory"], capture_output=True, text=True)
    checked += 1
    if done.returncode != 0:
        failed += 1
        print(f"thread_safety: {os.path.relpath(path)}:\n{done.stderr}", file=sys.stderr)
# The pass must be able to fail: a read of guarded state without its lock is an error.
probe = """#include "sandboxd/core/thread_annotations.hpp"
struct Probe { sandboxd::core::Mutex m; int value GUARDED_BY(m) = 0; };
int unguarded(Probe& p) { return p.value; }
"""
core_include = os.path.join(os.getcwd(), "core", "include")
done = subprocess.run(["clang++", "-std=c++20", "-I", core_include, "-x", "c++", "-", "-fsyntax-only",
                       "-Wthread-safety", "-Werror"], input=probe, capture_output=True, text=True)
if done.returncode == 0 or "requires holding mutex" not in done.stderr:
    print("thread_safety: an unguarded read was not caught; the analysis is not running",
          file=sys.stderr)
    failed += 1
print(f"thread_safety: {checked} sources checked with clang -Wthread-safety, {failed} failed")
sys.exit(1 if failed else 0)
PY
