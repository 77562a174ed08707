#!/usr/bin/env python3
"""Issue 36's figure: what the operator page's event streams cost `sandboxctl serve`. One serve
on the loopback_backend plugin (in-process sandboxes) is driven at a steady rate of acquire +
release pairs (two lifecycle events each: 50 pairs a second is 100 events a second), first with
no page open, then with N pages open (each page's three files fetched, then its event stream
held and read). serve's CPU comes from /proc (user + system ticks over the window), so the
difference between the two windows is what the pages cost, in percent of one core; acquire
latency is measured in both windows, and every stream is checked to have received every event.

    python3 bench/ui_streams.py --sandboxctl build/apps/sandboxctl/sandboxctl \\
        --plugin-dir build/plugins [--streams 50] [--events-per-second 100] [--seconds 20]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import selectors
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from loopback_serve import start_loopback_serve

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


class Readers:
    """N event streams held open and read by one thread; counts the events each received."""

    def __init__(self, host: str, port: int, cookie: str, count: int) -> None:
        self.selector = selectors.DefaultSelector()
        self.received = [0] * count
        self.sockets = []
        for index in range(count):
            page = http.client.HTTPConnection(host, port, timeout=10)
            for path in ("/ui", "/ui/app.js", "/ui/app.css"):  # what a browser loads first
                page.request("GET", path)
                answer = page.getresponse()
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"{path}: {answer.status}")
            page.close()
            sock = socket.create_connection((host, port), timeout=10)
            sock.sendall(f"GET /ui/events HTTP/1.1\r\nHost: bench\r\nCookie: {cookie}\r\n"
                         "Accept: text/event-stream\r\n\r\n".encode())
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, index)
            self.sockets.append(sock)
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopping:
            for key, _ in self.selector.select(timeout=0.2):
                try:
                    data = key.fileobj.recv(1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    raise RuntimeError(f"stream {key.data} was closed by serve")
                self.received[key.data] += data.count(b"\nevent: lifecycle\n")

    def close(self) -> None:
        self.stopping = True
        self.thread.join()
        for sock in self.sockets:
            sock.close()


def drive(host: str, port: int, token: str, pairs_per_second: float, seconds: float,
          first_thread: int) -> list[float]:
    """Acquire + release pairs at a steady rate over 20 conversations in turn (after the first
    round every acquire reclaims a released sandbox: two events a pair, a fleet that stays
    small); the acquire latencies in ms."""
    api = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies = []
    start = time.monotonic()
    pair = 0
    while time.monotonic() - start < seconds:
        due = start + pair / pairs_per_second
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        began = time.perf_counter()
        api.request("POST", "/v1/sandboxes/acquire",
                    json.dumps({"user_id": "bench", "thread_id": f"t-{first_thread + pair % 20}"}),
                    headers)
        answer = api.getresponse()
        body = json.loads(answer.read())
        latencies.append((time.perf_counter() - began) * 1000)
        if answer.status != 200:
            raise RuntimeError(f"acquire: {answer.status} {body}")
        api.request("POST", f"/v1/sandboxes/{body['sandbox_id']}/release", headers=headers)
        answer = api.getresponse()
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"release: {answer.status}")
        pair += 1
    return latencies


def window(pid: int, host: str, port: int, token: str, rate: float, seconds: float,
           first_thread: int) -> dict:
    before_cpu, before = cpu_seconds(pid), time.monotonic()
    latencies = drive(host, port, token, rate / 2, seconds, first_thread)
    cpu, wall = cpu_seconds(pid) - before_cpu, time.monotonic() - before
    latencies.sort()
    return {"pairs": len(latencies), "events": 2 * len(latencies),
            "cpu_percent": round(100 * cpu / wall, 2),
            "acquire_p50_ms": round(statistics.median(latencies), 3),
            "acquire_p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 3)}


def log_in(host: str, port: int, token: str) -> str:
    """The page's session cookie ("name=value"), as the page's log-in gets it."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("POST", "/ui/login", headers={"Authorization": f"Bearer {token}"})
    answer = conn.getresponse()
    answer.read()
    conn.close()
    if answer.status != 204:
        raise RuntimeError(f"log-in to the page answered {answer.status}")
    return answer.getheader("Set-Cookie").split(";")[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--plugin-dir", required=True, help="holds loopback_backend.so")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--events-per-second", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()

    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="sandboxd-ui-streams-") as tmp:
        work = Path(tmp)
        process, info = start_loopback_serve(args.sandboxctl, args.plugin_dir, work, token,
                                             replicas=100_000)
        try:
            host, port = info["listen"].removeprefix("http://").rsplit(":", 1)
            port = int(port)
            rate, seconds = args.events_per_second, args.seconds
            window(process.pid, host, port, token, rate, 2, 0)  # warm-up
            quiet = window(process.pid, host, port, token, rate, seconds, 0)
            cookie = log_in(host, port, token)
            readers = Readers(host, port, cookie, args.streams)
            time.sleep(1)  # each stream has sent what the log held
            received_before = list(readers.received)
            watched = window(process.pid, host, port, token, rate, seconds, 0)
            time.sleep(1)  # the last events reach every stream
            per_stream = [after - before for after, before in zip(readers.received,
                                                                   received_before)]
            readers.close()
        finally:
            process.terminate()
            process.wait(timeout=60)
    result = {
        "streams": args.streams, "events_per_second": rate, "seconds": seconds,
        "without_pages": quiet, "with_pages": watched,
        "stream_cost_cpu_percent": round(watched["cpu_percent"] - quiet["cpu_percent"], 2),
        "events_each_stream_received": {"min": min(per_stream), "max": max(per_stream),
                                        "sent": watched["events"]},
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(f"{args.streams} pages with their event streams at {rate:g} events/s, "
              f"{seconds:g} s windows:")
        for name, row in (("no page open", quiet), (f"{args.streams} pages open", watched)):
            print(f"  {name:16} serve CPU {row['cpu_percent']:6.2f} % of a core, "
                  f"acquire p50 {row['acquire_p50_ms']:.3f} ms p99 {row['acquire_p99_ms']:.3f} ms "
                  f"({row['events']} events)")
        print(f"  the streams cost {result['stream_cost_cpu_percent']:.2f} % of one core; each "
              f"stream received {min(per_stream)}..{max(per_stream)} of {watched['events']} "
              "events")
    missing = [count for count in per_stream if count != watched["events"]]
    if missing:
        print(f"ui_streams: {len(missing)} streams missed events", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
