#!/usr/bin/env python3
"""Snapshots and forks, on one engine (the engine of scripts/test_engine.sh), in rounds:

  per round: a cold acquire of a new conversation; 100 MiB of random bytes written to its
  workspace and 20 MiB to its layer; `sandboxctl snapshot`; the sandbox destroyed; an acquire of
  the conversation from the snapshot (path restored); `sandboxctl fork --count 10` of the
  restored sandbox (one snapshot, ten restores in parallel, each copying the 100 MiB); then
  everything destroyed and the snapshot deleted. Each step is one `sandboxctl` command timed
  from outside (its process start and state file included, as an operator's script runs it).

    bench/snapshot_fork.py --sandboxctl build/apps/sandboxctl/sandboxctl \\
        --socket /tmp/sandboxd-test-engine/podman.sock [--rounds N] [--forks N]

Prints the medians and the ratios BENCHMARKS.md keeps ("Snapshots and forks").
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from engine_and_cli import run_in, sandboxctl, timed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--image", default="localhost/sandboxd-test-sandbox:latest")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forks", type=int, default=10)
    args = parser.parse_args()
    prefix = "sandboxd-fork-bench"
    rows: dict[str, list[float]] = {"cold": [], "snapshot": [], "restore": [], "fork": []}
    with tempfile.TemporaryDirectory(prefix="sandboxd-fork-bench-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"sandbox": {
            "backend": {"use": "local_docker:LocalContainerBackend",
                        "socket": f"unix://{args.socket}", "image": args.image,
                        "container_prefix": prefix},
            "base_dir": str(state), "idle_timeout": 3600, "replicas": args.forks + 4,
            "max_snapshot_bytes_per_user": "100g"}}))
        for round_number in range(args.rounds):
            thread = f"r{round_number}"
            took, got = timed(args.sandboxctl, config, "acquire", "--user", "bench", "--thread",
                              thread)
            rows["cold"].append(took)
            sandbox = got["sandbox_id"]
            run_in(args.socket, f"{prefix}-{sandbox}",
                   "head -c 104857600 /dev/urandom > /mnt/user-data/workspace/ws.bin && "
                   "head -c 20971520 /dev/urandom > /etc/layer.bin")
            took, _ = timed(args.sandboxctl, config, "snapshot", sandbox, "--name", thread)
            rows["snapshot"].append(took)
            sandboxctl(args.sandboxctl, config, "destroy", sandbox)
            took, got = timed(args.sandboxctl, config, "acquire", "--user", "bench", "--thread",
                              thread, "--from-snapshot", thread)
            if got.get("path") != "restored":
                raise RuntimeError(f"not restored: {got}")
            rows["restore"].append(took)
            took, forked = timed(args.sandboxctl, config, "fork", sandbox, "--count",
                                 str(args.forks))
            rows["fork"].append(took)
            made = [s["sandbox_id"] for s in forked["sandboxes"]]
            if len(made) != args.forks:
                raise RuntimeError(f"fork made {len(made)} of {args.forks}")
            for sandbox_id in [*made, sandbox]:
                sandboxctl(args.sandboxctl, config, "destroy", sandbox_id)
            sandboxctl(args.sandboxctl, config, "snapshot-rm", thread, "--user", "bench")
            print(f"round {round_number + 1}: " +
                  ", ".join(f"{k} {v[-1]:.0f} ms" for k, v in rows.items()), flush=True)
    cold = statistics.median(rows["cold"])
    for name, values in rows.items():
        print(f"{name}: median {statistics.median(values):.0f} ms "
              f"(min {min(values):.0f}, max {max(values):.0f}, {len(values)} rounds)")
    print(f"restore / cold: {statistics.median(rows['restore']) / cold:.2f}")
    print(f"fork into {args.forks} / cold: {statistics.median(rows['fork']) / cold:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
