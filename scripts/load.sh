#!/usr/bin/env bash
# Load held (RELIABILITY.md §E): `sandboxctl serve` and `sandboxd-provisioner` on 127.0.0.1 over
# the in-process loopback_backend plugin, 200 good clients acquiring and releasing distinct
# conversations (the provisioner: create, get, delete) while 300 slow or unauthenticated clients
# hold connections; prints p50/p99 of the good requests, errors, peak RSS and threads. Bounded:
# --rounds per good client (10; --quick: 3) and 120 s. Exit 1 when a good request failed.
#   scripts/load.sh            the run behind RELIABILITY.md
#   scripts/load.sh --quick    3 rounds (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
rounds=10
[ "${1:-}" = "--quick" ] && rounds=3
for binary in "$build_dir/apps/sandboxctl/sandboxctl" "$build_dir/apps/provisioner/sandboxd-provisioner" \
              "$build_dir/plugins/loopback_backend.so"; do
  [ -e "$binary" ] || { echo "load: $binary does not exist; run scripts/setup.sh first" >&2; exit 2; }
done
python3 bench/load_daemons.py --sandboxctl "$build_dir/apps/sandboxctl/sandboxctl" \
  --provisioner "$build_dir/apps/provisioner/sandboxd-provisioner" \
  --plugin-dir "$build_dir/plugins" --rounds "$rounds" --seconds 120 \
  --json "$build_dir/bench/load.json"
