#!/usr/bin/env python3
"""Issue 45's figures, on one engine (root; the engine of scripts/test_engine.sh):

  1. a cold acquire of a new conversation with each conversation's storage bounded (the state
     directory on a loop-mounted btrfs, disk_limit 10g: a subvolume and its quota limit made per
     conversation) beside the same with disk_limit 0 on the same filesystem, rounds interleaved;
  2. with --engine-bench PATH (sandboxd_engine_bench): a new conversation's acquire from a
     pre-started slot (`--only slots`) with the state directory on the same btrfs, storage
     bounded (--disk-limit 10g: the conversation's subvolume and limit made before the claim
     binds it) beside unbounded;
  3. with --layer-looks N: N containers of the image started straight on the engine (no network,
     each having written 1 MiB to its layer), then what one sweep of the writable-layer watch
     costs: `GET /containers/{id}/json?size=true` of each in turn, as the watch thread asks
     them (one at a time), timed per look and in all;
  4. with --runtime runsc (Docker, where scripts/test_engine.sh declares it): a cold acquire and
     an idle sandbox's memory (the engine's stats, page cache excluded) under runsc beside runc.

Each acquire is `sandboxctl acquire` for a new conversation, timed from outside (one process per
command, as an operator's script would), then destroyed. Prints medians and ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from engine_and_cli import engine_call, engine_get, sandboxctl, timed


def layer_sweep(sock: str, image: str, count: int) -> None:
    """One sweep of the writable-layer watch over `count` containers, timed."""
    prefix = f"sbxlayers{os.getpid()}"
    made: list[str] = []
    try:
        started = time.monotonic()
        for i in range(count):
            status, body = engine_call(sock, "POST", f"/containers/create?name={prefix}-{i}", {
                "Image": image, "Cmd": ["sh", "-c", "head -c 1048576 /dev/zero > /tmp/f; "
                                                    "exec sleep 3600"],
                "Labels": {"sandboxd.bench": prefix},
                "HostConfig": {"NetworkMode": "none", "AutoRemove": True, "Memory": 64 << 20}})
            if status != 201:
                raise RuntimeError(f"create: {status} {body[:200]!r}")
            made.append(json.loads(body)["Id"])
            status, body = engine_call(sock, "POST", f"/containers/{made[-1]}/start")
            if status not in (204, 304):
                raise RuntimeError(f"start: {status} {body[:200]!r}")
            if (i + 1) % 100 == 0:
                print(f"  {i + 1} of {count} containers started "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
        time.sleep(2)  # each has written its megabyte
        looks: list[float] = []
        sweep = time.monotonic()
        for container in made:
            t0 = time.monotonic()
            inspected = engine_get(sock, f"/containers/{container}/json?size=true")
            looks.append((time.monotonic() - t0) * 1000)
            if inspected.get("SizeRw") is None:
                raise RuntimeError(f"no SizeRw for {container}")
        total = time.monotonic() - sweep
        looks.sort()
        print(f"writable-layer sweep of {count} containers: {total:.1f} s in all; one look "
              f"p50 {statistics.median(looks):.1f} ms, p90 {looks[int(len(looks) * 0.9)]:.1f} ms, "
              f"max {looks[-1]:.1f} ms")
    finally:
        for container in made:
            engine_call(sock, "DELETE", f"/containers/{container}?force=true")


def write_config(path: Path, base_dir: Path, sock: str, image: str, prefix: str,
                 disk_limit: str, runtime: str = "") -> None:
    backend = {"use": "local_docker:LocalContainerBackend", "socket": f"unix://{sock}",
               "image": image, "container_prefix": prefix, "memory": "512m"}
    if runtime:
        backend["runtime"] = runtime
    path.write_text(json.dumps({"sandbox": {
        "backend": backend, "base_dir": str(base_dir), "disk_limit": disk_limit,
        "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                      "path": str(base_dir / "leases.db")}}}))


def cold(binary: str, config: Path, thread: str) -> tuple[float, str]:
    took, got = timed(binary, config, "acquire", "--user", "bench", "--thread", thread)
    return took, got["sandbox_id"]


def slot_claims(engine_bench: str, sock: str, image: str, base: Path, disk_limit: str,
                rounds: int) -> list[float]:
    """provider_claimed of `sandboxd_engine_bench --only slots`, in ms, one per round."""
    base.mkdir(mode=0o700)
    jsonl = base / "rows.jsonl"
    command = [engine_bench, "--socket", f"unix://{sock}", "--image", image, "--rounds",
               str(rounds), "--only", "slots", "--base-dir", str(base), "--jsonl", str(jsonl),
               "--slot-arrival-seconds", "0"]
    if disk_limit != "0":
        command += ["--disk-limit", disk_limit]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=1800)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    return [row["acquire_us"] / 1000 for row in rows if row["scenario"] == "provider_claimed"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--image", default="localhost/sandboxd-test-sandbox:latest")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runtime", default="")
    parser.add_argument("--layer-looks", type=int, default=0,
                        help="also one writable-layer sweep over this many containers")
    parser.add_argument("--engine-bench", default="",
                        help="sandboxd_engine_bench: also the slot claim, bounded and not")
    args = parser.parse_args()
    if args.layer_looks > 0:
        layer_sweep(args.socket, args.image, args.layer_looks)
    if args.rounds < 1:
        return 0  # --rounds 0: the sweep alone
    with tempfile.TemporaryDirectory(prefix="sandboxd-storage-bench-") as tmp:
        work = Path(tmp)
        image, mount = work / "btrfs.img", work / "btrfs"
        mount.mkdir()
        subprocess.run(f"truncate -s 4G {image} && mkfs.btrfs -q {image} && "
                       f"mount -o loop {image} {mount}", shell=True, check=True,
                       stdout=subprocess.DEVNULL)
        try:
            rows: dict[str, list[float]] = {"bounded": [], "unbounded": []}
            configs = {}
            for kind, limit in (("bounded", "10g"), ("unbounded", "0")):
                base = mount / kind
                base.mkdir(mode=0o700)
                configs[kind] = work / f"{kind}.json"
                write_config(configs[kind], base, args.socket, args.image, f"sbxbench{kind[:2]}",
                             limit)
            for round_ in range(args.rounds):
                for kind in (("bounded", "unbounded") if round_ % 2 == 0
                             else ("unbounded", "bounded")):
                    ms, sandbox = cold(args.sandboxctl, configs[kind], f"r{round_}")
                    rows[kind].append(ms)
                    sandboxctl(args.sandboxctl, configs[kind], "destroy", sandbox)
            b, u = statistics.median(rows["bounded"]), statistics.median(rows["unbounded"])
            print(f"cold acquire, storage bounded (btrfs subvolume + quota): median {b:.1f} ms")
            print(f"cold acquire, unbounded, same filesystem:               median {u:.1f} ms")
            print(f"bounded / unbounded: {b / u:.2f}")
            if args.engine_bench:
                claims = {kind: slot_claims(args.engine_bench, args.socket, args.image,
                                            mount / f"slots-{kind}", limit, args.rounds)
                          for kind, limit in (("bounded", "10g"), ("unbounded", "0"))}
                for kind, values in claims.items():
                    print(f"slot claim, storage {kind}: median {statistics.median(values):.2f} ms,"
                          f" max {max(values):.2f} ms ({len(values)} claims)")
                print(f"slot claim bounded / unbounded: "
                      f"{statistics.median(claims['bounded']) / statistics.median(claims['unbounded']):.2f}")
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)
        if not args.runtime:
            return 0
        rows = {args.runtime: [], "runc": []}
        memory: dict[str, list[int]] = {args.runtime: [], "runc": []}
        configs = {}
        for runtime in rows:
            base = work / f"state-{runtime}"
            base.mkdir(mode=0o700)
            configs[runtime] = work / f"{runtime}.json"
            write_config(configs[runtime], base, args.socket, args.image, f"sbxrt{runtime[:4]}",
                         "0", "" if runtime == "runc" else runtime)
        for round_ in range(args.rounds):
            for runtime in (list(rows) if round_ % 2 == 0 else list(rows)[::-1]):
                ms, sandbox = cold(args.sandboxctl, configs[runtime], f"r{round_}")
                rows[runtime].append(ms)
                time.sleep(2)  # idle
                stats = engine_get(args.socket, f"/containers/sbxrt{runtime[:4]}-{sandbox}/stats"
                                                "?stream=false&one-shot=true")
                usage = stats["memory_stats"].get("usage", 0)
                inactive = stats["memory_stats"].get("stats", {}).get(
                    "total_inactive_file", stats["memory_stats"].get("stats", {}).get(
                        "inactive_file", 0))
                memory[runtime].append(usage - inactive)
                sandboxctl(args.sandboxctl, configs[runtime], "destroy", sandbox)
        for runtime in rows:
            print(f"cold acquire under {runtime}: median {statistics.median(rows[runtime]):.1f} ms;"
                  f" idle memory median {statistics.median(memory[runtime]) / 2**20:.1f} MiB")
        print(f"{args.runtime} / runc cold acquire: "
              f"{statistics.median(rows[args.runtime]) / statistics.median(rows['runc']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
