#!/usr/bin/env python3
"""Pre-started slots through sandboxd-provisioner: the time from a gateway's
POST /api/sandboxes for a new conversation to the sandbox answering GET /v1/sandbox, from a
provisioner keeping one slot ready (warm_slots: 1) beside one without slots, on the same
engine, alternating round by round; each measured create runs with the engine otherwise idle.

    bench/provisioner_slots.py --provisioner build/apps/provisioner/sandboxd-provisioner \\
        --socket /tmp/sandboxd-test-engine/podman.sock [--image IMAGE] [--rounds N]

Prints the median and p90 of both and their ratio (BENCHMARKS.md, "Pre-started slots")."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

KEY = "bench-" + secrets.token_hex(8)


def call(base: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        base + path, method=method, headers={"X-API-Key": KEY, "Content-Type": "application/json"},
        data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read() or b"{}")


def wait_serving(url: str, deadline_seconds: float = 60) -> None:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/v1/sandbox", timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.005)
    raise RuntimeError(f"{url} did not answer within {deadline_seconds} s")


class Provisioner:
    def __init__(self, binary: str, root: Path, name: str, socket: str, image: str,
                 warm_slots: int) -> None:
        self.base_dir = root / name
        self.base_dir.mkdir(mode=0o700, parents=True)
        self.prefix = f"sbxprov{os.getpid()}{name}"
        backend = {"use": "local_docker:LocalContainerBackend", "socket": f"unix://{socket}",
                   "image": image, "container_prefix": self.prefix, "sandbox_host": "127.0.0.1",
                   "stop_timeout_seconds": 2}
        if warm_slots:
            backend["warm_slots"] = warm_slots
        config = root / f"{name}.json"
        config.write_text(json.dumps({"provisioner": {
            "listen": "127.0.0.1:0", "api_key": KEY, "host_base_dir": str(self.base_dir),
            "backend": backend}}))
        self.log = open(root / f"{name}.log", "wb")
        self.process = subprocess.Popen([binary, "--config", str(config)],
                                        stdout=subprocess.PIPE, stderr=self.log)
        line = self.process.stdout.readline().decode()
        if not line.startswith("listening on "):
            raise RuntimeError(f"{name} did not start: {(root / f'{name}.log').read_text()[-2000:]}")
        self.base = line.split()[-1]

    def new_conversation(self, thread: str) -> tuple[float, str]:
        start = time.monotonic()
        answer = call(self.base, "POST", "/api/sandboxes",
                      {"sandbox_id": thread, "thread_id": thread, "user_id": "bench-user"})
        wait_serving(answer["sandbox_url"])
        return time.monotonic() - start, answer["sandbox_id"]

    def delete(self, sandbox_id: str) -> None:
        call(self.base, "DELETE", f"/api/sandboxes/{sandbox_id}")

    def claims(self) -> int:
        self.log.flush()
        return Path(self.log.name).read_text().count("Claimed a pre-started slot")

    def slot_ready(self) -> bool:
        return "slot(s) ready" in Path(self.log.name).read_text()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provisioner", required=True)
    parser.add_argument("--socket", required=True, help="the engine's unix socket path")
    parser.add_argument("--image", default="localhost/sandboxd-test-sandbox:latest")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--refill-seconds", type=float, default=3.0,
                        help="pause after a claim, for the slot to be refilled")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sbxprov"))
    slots = cold = None
    try:
        slots = Provisioner(args.provisioner, root, "slots", args.socket, args.image, 1)
        cold = Provisioner(args.provisioner, root, "cold", args.socket, args.image, 0)
        # The first create teaches the pool its mount points; then it keeps one slot ready.
        _, teacher = slots.new_conversation("teach")
        slots.delete(teacher)
        time.sleep(args.refill_seconds)
        times = {"claimed": [], "cold": []}
        for round_ in range(args.rounds):
            order = [("claimed", slots), ("cold", cold)]
            if round_ % 2:
                order.reverse()
            for label, provisioner in order:
                seconds, sandbox_id = provisioner.new_conversation(f"{label}-{round_}")
                times[label].append(seconds * 1000)
                provisioner.delete(sandbox_id)
                time.sleep(args.refill_seconds if label == "claimed" else 0.5)
        claims = slots.claims()
        print(f"{'scenario':34} {'n':>4} {'median_ms':>10} {'p90_ms':>10}")
        for label, values in times.items():
            values.sort()
            p90 = values[min(len(values) - 1, len(values) * 9 // 10)]
            print(f"provisioner_{label:22} {len(values):4} {statistics.median(values):10.2f} "
                  f"{p90:10.2f}")
        print(f"{'new conversation through the provisioner, slot / cold, median':64} "
              f"{statistics.median(times['claimed']) / statistics.median(times['cold']):6.2f}")
        print(f"claimed by the slots provisioner: {claims} of {args.rounds}")
        return 0 if claims == args.rounds else 1
    finally:
        for provisioner in (slots, cold):
            if provisioner:
                provisioner.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
