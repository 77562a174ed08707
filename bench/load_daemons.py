#!/usr/bin/env python3
"""Load held (issue 20 C): `sandboxctl serve` and `sandboxd-provisioner` answer every good
request while hostile clients hold connections.

For each daemon, on 127.0.0.1 over the loopback_backend plugin (in-process sandboxes whose
readiness probe one in-process responder answers, so the run measures the daemon, not an
engine):
  - `--clients` good clients (200), each with its own conversation, repeat acquire + release
    (serve) or create + get + delete (provisioner) with credentials, `--rounds` times;
  - at the same time `--hostile` clients (300) without credentials (class Hostile): slowloris
    heads, whole unauthenticated requests, chunk-size lines with endless extensions, and
    public-route requests declaring a body they never send;
  - the daemon's RSS and thread count are sampled from /proc every 100 ms.
Bounded in count (rounds) and time (--seconds). Prints one table row per daemon and, with
--json FILE, the same as JSON. Exit 1 when a good request failed.

    bench/load_daemons.py --sandboxctl build/apps/sandboxctl/sandboxctl \\
        --provisioner build/apps/provisioner/sandboxd-provisioner --plugin-dir build/plugins
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from loopback_serve import start_loopback_serve


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Sampler:
    """Peak RSS (MiB) and threads of one process, read from /proc/PID/status."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_mib = 0.0
        self.threads = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    self.rss_mib = max(self.rss_mib, int(line.split()[1]) / 1024)
                elif line.startswith("Threads:"):
                    self.threads = max(self.threads, int(line.split()[1]))

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


class Hostile:
    """The hostile clients, none with credentials (RELIABILITY.md E): half trickle a request
    head one byte a second and reconnect when closed (slowloris); a sixth send whole requests
    as fast as they are answered; a sixth send a chunk-size line with an endless extension
    (issue 32 A.1: it grew the daemon by what they sent); a sixth hold a request to the public
    route with a declared body they never send (issue 32 A.3: they held every connection slot),
    reconnecting when closed."""

    def __init__(self, port: int, count: int, path: bytes, public_path: bytes) -> None:
        self.port = port
        self.path = path
        self.public_path = public_path
        self.stop = threading.Event()
        sixth = max(count // 6, 1)
        self.slow_target = count - 3 * sixth
        self.holder_target = sixth
        self.slow: list[socket.socket] = []
        self.holders: list[socket.socket] = []
        self.unauth_answers = 0
        self.extension_bytes = 0
        self.peak_slow = 0
        self.peak_holders = 0
        self.threads = [threading.Thread(target=self.trickle, daemon=True),
                        threading.Thread(target=self.hold_public_route, daemon=True)]
        self.threads += [threading.Thread(target=self.unauthenticated, daemon=True)
                         for _ in range(sixth)]
        self.threads += [threading.Thread(target=self.endless_extension, daemon=True)
                         for _ in range(sixth)]
        for t in self.threads:
            t.start()

    def connect(self) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            s.setblocking(False)
            return s
        except OSError:
            return None

    def trickle(self) -> None:
        head = b"GET " + self.path + b" HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 64
        position = 0
        while not self.stop.wait(0.2 if position % 5 else 0.05):
            while len(self.slow) < self.slow_target and not self.stop.is_set():
                s = self.connect()
                if s is None:
                    break
                self.slow.append(s)
            self.peak_slow = max(self.peak_slow, len(self.slow))
            if position % 5 == 0:  # one byte a second per connection
                byte = head[(position // 5) % len(head):(position // 5) % len(head) + 1]
                for s in list(self.slow):
                    try:
                        s.send(byte)
                    except OSError:
                        s.close()
                        self.slow.remove(s)
            position += 1
        for s in self.slow:
            s.close()

    def hold_public_route(self) -> None:
        head = (b"GET " + self.public_path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                b"\r\n")
        while not self.stop.wait(0.1):
            for s in list(self.holders):  # closed by the daemon: drop and reconnect
                try:
                    if s.recv(4096) == b"":
                        raise OSError("closed")
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                s.close()
                self.holders.remove(s)
            while len(self.holders) < self.holder_target and not self.stop.is_set():
                s = self.connect()
                if s is None:
                    break
                try:
                    s.send(head)
                except OSError:
                    s.close()
                    continue
                self.holders.append(s)
            self.peak_holders = max(self.peak_holders, len(self.holders))
        for s in self.holders:
            s.close()

    def endless_extension(self) -> None:
        head = (b"GET " + self.public_path + b" HTTP/1.1\r\nHost: x\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n1;ext=")
        block = b"a" * 65536
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            except OSError:
                time.sleep(0.05)
                continue
            try:
                s.sendall(head)
                for _ in range(64):  # up to 4 MiB a connection
                    if self.stop.is_set():
                        break
                    self.extension_bytes += s.send(block)
            except OSError:
                pass
            s.close()

    def unauthenticated(self) -> None:
        while not self.stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("POST", self.path.decode(), body=b"{}" * 100,
                             headers={"Content-Type": "application/json"})
                conn.getresponse().read()
                conn.close()
                self.unauth_answers += 1
            except OSError:
                time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def run_good(port: int, clients: int, rounds: int, seconds: float, one_round) -> dict:
    latencies: dict[str, list[float]] = {}
    errors: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for round_number in range(rounds):
            if time.monotonic() > deadline:
                break
            try:
                for name, took in one_round(conn, index, round_number):
                    with lock:
                        latencies.setdefault(name, []).append(took)
            except Exception as e:  # noqa: BLE001 - every failure of a good client counts
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"latencies": latencies, "errors": errors, "seconds": time.monotonic() - started}


def timed(conn: http.client.HTTPConnection, method: str, path: str, body, headers: dict,
          expect: int) -> tuple[float, dict]:
    """One request: its latency and its JSON answer; any other status is an error."""
    started = time.perf_counter()
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    text = response.read()
    took = time.perf_counter() - started
    if response.status != expect:
        raise RuntimeError(f"{method} {path} answered {response.status}: {text[:200]!r}")
    return took, json.loads(text or b"{}")


def wait_listening(process: subprocess.Popen, prefix: str) -> str:
    while True:
        line = process.stdout.readline().decode()
        if not line:
            raise RuntimeError(f"the daemon exited before listening (exit {process.wait()})")
        if prefix in line:
            return line


def load_serve(args, work: Path) -> dict:
    token = secrets.token_hex(16)
    process, document = start_loopback_serve(args.sandboxctl, args.plugin_dir, work, token,
                                             replicas=4096, state="serve-state")
    port = int(document["listen"].rsplit(":", 1)[1])
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def one_round(conn, index, round_number):
        body = {"user_id": f"user{index % 20}", "thread_id": f"load-{index}"}
        took, acquired = timed(conn, "POST", "/v1/sandboxes/acquire", body, headers, 200)
        yield "acquire", took
        took, _ = timed(conn, "POST", f"/v1/sandboxes/{acquired['sandbox_id']}/release", None,
                        headers, 200)
        yield "release", took

    return measure("sandboxctl serve", process, port, b"/v1/sandboxes", b"/v1/health", args,
                   one_round, work)


def load_provisioner(args, work: Path) -> dict:
    key = secrets.token_hex(16)
    config = work / "provisioner.json"
    config.write_text(json.dumps({"provisioner": {
        "api_key": key, "host_base_dir": str(work / "provisioner-state"),
        "plugin_dirs": [os.path.abspath(args.plugin_dir)],
        "worker_threads": 64,
        "backend": {"use": "loopback_backend:LoopbackBackend"}}}))
    log = open(work / "provisioner.log", "wb")
    process = subprocess.Popen(
        [args.provisioner, "--config", str(config), "--listen", "127.0.0.1:0",
         "--log-level", "warning"], stdout=subprocess.PIPE, stderr=log)
    line = wait_listening(process, "listening on")
    port = int(line.strip().rsplit(":", 1)[1])
    headers = {"X-API-Key": key, "Content-Type": "application/json"}

    def one_round(conn, index, round_number):
        sandbox_id = f"load-{index}-{round_number}"
        body = {"sandbox_id": sandbox_id, "thread_id": f"t{index}", "user_id": f"user{index % 20}"}
        yield "create", timed(conn, "POST", "/api/sandboxes", body, headers, 200)[0]
        yield "get", timed(conn, "GET", f"/api/sandboxes/{sandbox_id}", None, headers, 200)[0]
        yield "delete", timed(conn, "DELETE", f"/api/sandboxes/{sandbox_id}", None, headers,
                              200)[0]

    return measure("sandboxd-provisioner", process, port, b"/api/sandboxes", b"/health", args,
                   one_round, work)


def measure(name, process, port, hostile_path, public_path, args, one_round, work) -> dict:
    sampler = Sampler(process.pid)
    hostile = Hostile(port, args.hostile, hostile_path, public_path)
    time.sleep(2)  # the slow clients are in
    result = run_good(port, args.clients, args.rounds, args.seconds, one_round)
    peak_slow = hostile.peak_slow
    peak_holders = hostile.peak_holders
    extension_mib = hostile.extension_bytes / 2**20
    unauth = hostile.unauth_answers
    hostile.close()
    sampler.close()
    process.send_signal(signal.SIGTERM)
    exit_code = process.wait(timeout=60)
    row = {"daemon": name, "good_clients": args.clients, "hostile_clients": args.hostile,
           "slow_connections_held_peak": peak_slow, "unauthenticated_answers": unauth,
           "public_route_holders_peak": peak_holders,
           "chunk_extension_mib_sent": round(extension_mib, 1),
           "errors": len(result["errors"]), "error_samples": result["errors"][:5],
           "seconds": round(result["seconds"], 2), "peak_rss_mib": round(sampler.rss_mib, 1),
           "peak_threads": sampler.threads, "exit_code": exit_code, "operations": {}}
    for op, values in result["latencies"].items():
        row["operations"][op] = {"count": len(values),
                                 "p50_ms": round(percentile(values, 0.5) * 1000, 2),
                                 "p99_ms": round(percentile(values, 0.99) * 1000, 2),
                                 "max_ms": round(max(values) * 1000, 2)}
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--provisioner", required=True)
    parser.add_argument("--plugin-dir", required=True, help="holds loopback_backend.so")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--hostile", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--only", choices=["serve", "provisioner"])
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sandboxd-load-") as directory:
        work = Path(directory)
        if args.only in (None, "serve"):
            rows.append(load_serve(args, work))
        if args.only in (None, "provisioner"):
            rows.append(load_provisioner(args, work))
    print(f"{'daemon':22} {'op':8} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'errors':>6} {'slow held':>9} {'401s':>6} {'ext MiB':>8} {'RSS MiB':>8} "
          f"{'threads':>7}")
    for row in rows:
        for op, figures in row["operations"].items():
            print(f"{row['daemon']:22} {op:8} {figures['count']:6} {figures['p50_ms']:8} "
                  f"{figures['p99_ms']:8} {figures['max_ms']:8} {row['errors']:6} "
                  f"{row['slow_connections_held_peak']:9} {row['unauthenticated_answers']:6} "
                  f"{row['chunk_extension_mib_sent']:8} {row['peak_rss_mib']:8} "
                  f"{row['peak_threads']:7}")
        for sample in row["error_samples"]:
            print(f"  error: {sample}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(row["errors"] == 0 and row["exit_code"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
