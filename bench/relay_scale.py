#!/usr/bin/env python3
"""Issue 33's scale figure: N `isolated` sandboxes held by one `sandboxctl serve`, each reached
only through serve's relay, on the loopback_backend plugin (in-process sandboxes: the engine
could not hold that many here), with `namespaced: true` so that every sandbox is reached the way
an isolated one is (a socket the backend makes, then the relay's token gate).

Measured from /proc of the serve process: resident memory and open descriptors after start,
after N acquires, while N clients each hold a kept-alive relay connection (one request answered
on each, to its own sandbox, with its own token), and after they close. Per sandbox: the
differences over N.

    python3 bench/relay_scale.py --sandboxctl build/apps/sandboxctl/sandboxctl \\
        --plugin-dir build/plugins [--sandboxes 500] [--json]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loopback_serve import start_loopback_serve


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def reading(pid: int) -> dict:
    return {"rss_kib": rss_kib(pid), "fds": descriptors(pid)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--plugin-dir", required=True, help="holds loopback_backend.so")
    parser.add_argument("--sandboxes", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()

    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="sandboxd-relay-scale-") as tmp:
        work = Path(tmp)
        process, info = start_loopback_serve(args.sandboxctl, args.plugin_dir, work, token,
                                             replicas=args.sandboxes + 100, namespaced=True)
        try:
            host, port = info["listen"].removeprefix("http://").rsplit(":", 1)
            relay_host, relay_port = info["relay"].removeprefix("http://").rsplit(":", 1)
            readings = {"started": reading(process.pid)}
            api = http.client.HTTPConnection(host, int(port), timeout=30)
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            sandboxes = []
            for n in range(args.sandboxes):
                api.request("POST", "/v1/sandboxes/acquire",
                            json.dumps({"user_id": f"user{n}", "thread_id": "t-1"}), headers)
                answer = api.getresponse()
                body = json.loads(answer.read())
                if answer.status != 200:
                    raise RuntimeError(f"acquire {n}: {answer.status} {body}")
                if not body["sandbox_url"].startswith(info["relay"]):
                    raise RuntimeError(f"not a relay URL: {body['sandbox_url']}")
                sandboxes.append(body)
            readings["acquired"] = reading(process.pid)

            held = []
            for sandbox in sandboxes:
                path = sandbox["sandbox_url"][len(info["relay"]):] + "/v1/sandbox"
                conn = socket.create_connection((relay_host, int(relay_port)), timeout=30)
                head = "".join(f"{k}: {v}\r\n" for k, v in sandbox["request_headers"].items())
                conn.sendall(f"GET {path} HTTP/1.1\r\nHost: relay\r\n{head}\r\n".encode())
                answer = b""
                while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                    piece = conn.recv(4096)
                    if not piece:
                        break
                    answer += piece
                if not answer.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"relay answered {answer[:80]!r}")
                held.append(conn)
            readings["holding"] = reading(process.pid)
            for conn in held:
                conn.close()
            # The relay sees each close when it next reads that socket: give it a moment.
            deadline = time.monotonic() + 10
            while descriptors(process.pid) > readings["acquired"]["fds"] + 2 and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            api.request("GET", "/metrics", headers=headers)
            metrics = api.getresponse().read().decode()
            readings["closed"] = reading(process.pid)
        finally:
            process.terminate()
            process.wait(timeout=60)

    n = args.sandboxes
    per_sandbox = {
        "rss_bytes_per_sandbox": round((readings["acquired"]["rss_kib"]
                                        - readings["started"]["rss_kib"]) * 1024 / n),
        "rss_bytes_per_held_connection": round((readings["holding"]["rss_kib"]
                                                - readings["acquired"]["rss_kib"]) * 1024 / n),
        "fds_per_sandbox": (readings["acquired"]["fds"] - readings["started"]["fds"]) / n,
        "fds_per_held_connection": (readings["holding"]["fds"]
                                    - readings["acquired"]["fds"]) / n,
    }
    forwarded = [line for line in metrics.splitlines()
                 if line.startswith('sandboxd_relay_requests_total{result="forwarded"}')]
    result = {"sandboxes": n, "readings": readings, **per_sandbox,
              "relay_forwarded": forwarded[0].split()[-1] if forwarded else None}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"relay scale: {n} isolated sandboxes on one serve (loopback_backend, namespaced)")
        for name, values in readings.items():
            print(f"  {name:<9} RSS {values['rss_kib'] / 1024:7.1f} MiB, {values['fds']:5d} fds")
        print(f"  per sandbox: {per_sandbox['rss_bytes_per_sandbox']} bytes, "
              f"{per_sandbox['fds_per_sandbox']:.2f} fds; per held relay connection: "
              f"{per_sandbox['rss_bytes_per_held_connection']} bytes, "
              f"{per_sandbox['fds_per_held_connection']:.2f} fds; "
              f"relay forwarded {result['relay_forwarded']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
