#!/usr/bin/env bash
# The lock rules the compiler checks (plugins and apps since issue 35): every source
# of the core, the plugins and the programs, and the provider tests' fixtures, parsed by clang
# with -Wthread-safety -Werror (-fsyntax-only: no object is built). The flags come from ./build's compile_commands.json
# (scripts/setup.sh makes it), with gcc swapped for clang++. CI does not run this pass: its clang
# build (scripts/configure_asan.sh) compiles every source with -Wthread-safety -Werror (the
# SANDBOXD_THREAD_SAFETY option), which checks the same rules on more sources at no extra parse;
# CI runs only the probe that shows the analysis can fail.
#   scripts/thread_safety.sh            every source of the core, plugins and apps, then the probe
#   scripts/thread_safety.sh --probe    only the probe: an unguarded read must be an error
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
probe_only=0
[ "${1:-}" != --probe ] || probe_only=1
[ "$probe_only" = 1 ] || [ -f "$build_dir/compile_commands.json" ] ||
  { echo "thread_safety: $build_dir/compile_commands.json is missing; run scripts/setup.sh" >&2; exit 2; }
command -v clang++ >/dev/null || { echo "thread_safety: clang++ is missing (scripts/setup.sh installs clang)" >&2; exit 2; }
python3 - "$build_dir/compile_commands.json" "$probe_only" <<'PY'
import concurrent.futures, json, os, shlex, subprocess, sys
probe_only = sys.argv[2] == "1"
entries = [] if probe_only else json.load(open(sys.argv[1]))
root = os.getcwd()
wanted = tuple(os.path.join(root, part) for part in
               ("core/src/", "plugins/", "apps/", "tests/provider/provider_seed_test.cpp"))
def command_of(entry):
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
    return ["clang++", *out, "-fsyntax-only", "-Wthread-safety", "-Werror",
            "-Wno-ambiguous-reversed-operator", "-Wno-unknown-warning-option"]

def check(entry):
    return entry["file"], subprocess.run(command_of(entry), cwd=entry["directory"],
                                         capture_output=True, text=True)

chosen = [entry for entry in entries if entry["file"].startswith(wanted)]
failed = 0
checked = 0
# One clang per CPU: each parse is seconds, and there are some ninety sources.
with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
    for path, done in pool.map(check, chosen):
        checked += 1
        if done.returncode != 0:
            failed += 1
            print(f"thread_safety: {os.path.relpath(path)}:\n{done.stderr}", file=sys.stderr)
# The pass must be able to fail: a read of guarded state without its lock is an error.
probe = """#include "sandboxd/thread_annotations.hpp"
struct Probe { sandboxd::Mutex m; int value GUARDED_BY(m) = 0; };
int unguarded(Probe& p) { return p.value; }
"""
sdk_include = os.path.join(root, "sdk", "include")
done = subprocess.run(["clang++", "-std=c++20", "-I", sdk_include, "-x", "c++", "-", "-fsyntax-only",
                       "-Wthread-safety", "-Werror"], input=probe, capture_output=True, text=True)
if done.returncode == 0 or "requires holding mutex" not in done.stderr:
    print("thread_safety: an unguarded read was not caught; the analysis is not running",
          file=sys.stderr)
    failed += 1
print(f"thread_safety: {checked} sources checked with clang -Wthread-safety, {failed} failed")
sys.exit(1 if failed else 0)
PY
