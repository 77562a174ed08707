#!/usr/bin/env python3
"""The kubernetes backend's listing at fleet size: one `sandboxctl reconcile` pass
(the core's orphan reconciliation, which calls the backend's list_running) over 1,000 and
10,000 sandbox pods in the stand-in API server (tests/support/kube_standin.py, over TLS with a
bearer token). Counts the API requests the pass made (from the stand-in's request log) and
times it, so that the per-pod cost can be compared across fleet sizes: the listing is paged
with limit/continue and must never cost one request per sandbox.

    bench/kubernetes_listing.py --sandboxctl build/apps/sandboxctl/sandboxctl \\
        [--pods 1000,10000] [--page-size 500] [--rounds 3]

Prints one row per fleet size (BENCHMARKS.md, "Kubernetes backend"). The stand-in is Python,
so the wall time includes its answering; sandboxctl's own CPU time per pod is ours, and with
the request count it is the figure that must stay flat."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from kube_standin_process import StandinProcess  # noqa: E402


class Standin(StandinProcess):
    def populate(self, pods: int) -> None:
        """`pods` running, ready sandbox pods as the backend makes them (one keep-alive
        connection; the stand-in starts pods ready)."""
        connection = self.connection()
        for n in range(pods):
            sandbox_id = f"{n:016x}"
            status, _ = self.request(connection, "POST", "/api/v1/namespaces/sandboxes/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"sandbox-{sandbox_id}",
                             "labels": {"app": "deer-flow-sandbox", "sandbox-id": sandbox_id,
                                        "sandboxd.io/managed-by": "sandboxd"},
                             "annotations": {"sandboxd.io/user-id": f"user-{n % 97}",
                                             "sandboxd.io/thread-id": f"thread-{n}"}},
                "spec": {"containers": [{"name": "sandbox", "image": "all-in-one",
                                         "ports": [{"name": "http", "containerPort": 8080}]}]}})
            if status != 201:
                raise RuntimeError(f"creating pod {n} was answered {status}")
        connection.close()

    def requests_made(self) -> list[dict]:
        return self.call("GET", "/_standin/requests")[1]["requests"]


def one_fleet(sandboxctl: str, pods: int, page_size: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="sandboxd-kube-bench-") as scratch:
        root = Path(scratch)
        standin = Standin(root)
        try:
            standin.populate(pods)
            (root / "state").mkdir(mode=0o700)
            config = root / "sandboxd.json"
            config.write_text(json.dumps({"sandbox": {
                "backend": {"use": "kubernetes:KubernetesBackend",
                            "kubeconfig": str(standin.kubeconfig), "url_mode": "cluster_dns",
                            "image": "all-in-one", "list_page_size": page_size},
                "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                              "path": str(root / "state" / "leases.db")},
                "base_dir": str(root / "state")}}))
            seconds, cpu, requests = [], [], []
            for _ in range(rounds):
                before = len(standin.requests_made())
                started = time.monotonic()
                used = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped: sandboxctl only
                done = subprocess.run([sandboxctl, "--config", str(config), "reconcile", "--json"],
                                      capture_output=True, text=True, timeout=1200)
                seconds.append(time.monotonic() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
                if done.returncode != 0:
                    raise RuntimeError(f"reconcile exited {done.returncode}: {done.stderr[-500:]}")
                made = standin.requests_made()[before + 1:]  # the count's own GET is not ours
                requests.append(len(made))
                report = json.loads(done.stdout)
        finally:
            standin.stop()
    median = statistics.median(seconds)
    return {"pods": pods, "page_size": page_size, "api_requests": max(requests),
            "reconcile_seconds_median": round(median, 3),
            "microseconds_per_pod": round(median / pods * 1e6, 1),
            "sandboxctl_cpu_microseconds_per_pod": round(statistics.median(cpu) / pods * 1e6, 1),
            "last_report": report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--pods", default="1000,10000")
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not os.access(args.sandboxctl, os.X_OK):
        parser.error(f"--sandboxctl {args.sandboxctl} is not an executable")
    rows = [one_fleet(args.sandboxctl, int(n), args.page_size, args.rounds)
            for n in args.pods.split(",")]
    for row in rows:
        print(f"[ kubernetes ] reconcile over {row['pods']:>6} pods, pages of "
              f"{row['page_size']}: {row['api_requests']} API requests, "
              f"{row['reconcile_seconds_median'] * 1000:.0f} ms median "
              f"({row['microseconds_per_pod']} µs per pod, of which sandboxctl's CPU "
              f"{row['sandboxctl_cpu_microseconds_per_pod']} µs)")
        print(json.dumps({k: v for k, v in row.items() if k != "last_report"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
