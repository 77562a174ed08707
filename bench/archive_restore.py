#!/usr/bin/env python3
"""The archived tier's figures, on one engine (the engine of scripts/test_engine.sh):

  per round, interleaved: a cold acquire of a new conversation (`sandboxctl acquire`, timed from
  outside: one process per command, as an operator's script runs it), and an acquire of an
  archived conversation (its sandbox released, archived by `sandboxctl reap` past
  archive_after_seconds, its container gone) that makes it from its archive (path restored).
  Each sandbox wrote 8 MiB in its layer and 8 MiB in its workspace first. Also the bytes on disk
  an archived conversation holds (its snapshot's record: directories + image layer) beside
  what a parked one costs (its container, running: its memory as the engine counts it).

Prints medians and the ratio restored ÷ cold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from engine_and_cli import engine_call, run_in, sandboxctl, timed


def timed_acquire(binary: str, config: Path, thread: str) -> tuple[float, dict]:
    return timed(binary, config, "acquire", "--user", "bench", "--thread", thread)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--image", default="localhost/sandboxd-test-sandbox:latest")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    prefix = "sandboxd-archive-bench"
    cold_ms: list[float] = []
    restored_ms: list[float] = []
    archived_bytes: list[int] = []
    parked_memory: list[int] = []
    with tempfile.TemporaryDirectory(prefix="sandboxd-archive-bench-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"sandbox": {
            "backend": {"use": "local_docker:LocalContainerBackend",
                        "socket": f"unix://{args.socket}", "image": args.image,
                        "container_prefix": prefix},
            "base_dir": str(state), "archive_after_seconds": 1, "idle_timeout": 3600}}))
        for round_number in range(args.rounds):
            thread = f"r{round_number}"
            # Cold: a conversation never seen.
            took, got = timed_acquire(args.sandboxctl, config, f"cold-{thread}")
            cold_ms.append(took)
            sandboxctl(args.sandboxctl, config, "destroy", got["sandbox_id"])
            # Archived: written to, released, archived, then acquired again.
            _, got = timed_acquire(args.sandboxctl, config, thread)
            sandbox = got["sandbox_id"]
            container = f"{prefix}-{sandbox}"
            run_in(args.socket, container,
                   "head -c 8388608 /dev/urandom > /etc/layer.bin && "
                   "head -c 8388608 /dev/urandom > /mnt/user-data/workspace/ws.bin")
            status, stats = engine_call(args.socket, "GET", f"/containers/{container}/stats?stream=false")
            if status == 200:
                memory = json.loads(stats).get("memory_stats", {}).get("usage")
                if memory:
                    parked_memory.append(int(memory))
            sandboxctl(args.sandboxctl, config, "release", sandbox)
            time.sleep(1.1)
            reaped = sandboxctl(args.sandboxctl, config, "reap")
            if reaped.get("archived") != [sandbox]:
                raise RuntimeError(f"not archived: {reaped}")
            listed = sandboxctl(args.sandboxctl, config, "snapshots")["snapshots"]
            archived_bytes += [s["bytes"] for s in listed if s["name"] == f"archive-{sandbox}"]
            took, got = timed_acquire(args.sandboxctl, config, thread)
            if got["path"] != "restored":
                raise RuntimeError(f"not restored: {got}")
            restored_ms.append(took)
            sandboxctl(args.sandboxctl, config, "destroy", sandbox)
            print(f"round {round_number + 1}: cold {cold_ms[-1]:.0f} ms, restored "
                  f"{restored_ms[-1]:.0f} ms", flush=True)
    cold, restored = statistics.median(cold_ms), statistics.median(restored_ms)
    print(f"cold acquire (new conversation): median {cold:.0f} ms over {len(cold_ms)}")
    print(f"archived -> restored acquire:    median {restored:.0f} ms over {len(restored_ms)}; "
          f"ratio {restored / cold:.2f}")
    if archived_bytes:
        print(f"bytes an archived conversation holds on disk: median "
              f"{statistics.median(archived_bytes) / 1048576:.1f} MiB (8 MiB layer + 8 MiB "
              f"workspace written)")
    if parked_memory:
        print(f"memory of the same sandbox parked running (the engine's usage, its page cache "
              f"included): median "
              f"{statistics.median(parked_memory) / 1048576:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
