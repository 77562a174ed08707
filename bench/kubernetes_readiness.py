#!/usr/bin/env python3
"""How soon a new sandbox on Kubernetes is handed out once its pod turns Ready: the
time from the pod's Ready condition to `sandboxctl acquire` returning, with the backend
following the pod on a watch, beside the same backend polling it (a Role without the watch
verb, which the stand-in plays with --forbid-watch). Runs against the stand-in API server
(tests/support/kube_standin.py) with pods that stay Pending until the bench drives them Ready,
and NodePorts backed by a real httpd, so the core's own readiness probe runs as it would.

    bench/kubernetes_readiness.py --sandboxctl build/apps/sandboxctl/sandboxctl [--rounds 10]

Each round drives the pod Ready at a different moment between 2 and 3 s after it was made (when
polling has reached its one-second step), so the polling figure is the average case, not a
lucky one. Prints the median and the worst of each (BENCHMARKS.md, "Kubernetes backend")."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from kube_standin_process import StandinProcess  # noqa: E402


def start_standin(directory: Path, forbid_watch: bool) -> StandinProcess:
    """Pods stay Pending until driven; NodePorts are backed by a real httpd."""
    return StandinProcess(directory, "--pods-start", "pending", "--serve-pods",
                          str(directory / "pods"), *(["--forbid-watch"] if forbid_watch else []))


def measure(sandboxctl: str, forbid_watch: bool, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="sandboxd-kube-ready-") as scratch:
        root = Path(scratch)
        standin = start_standin(root, forbid_watch)
        (root / "state").mkdir(mode=0o700)
        config = root / "sandboxd.json"
        config.write_text(json.dumps({"sandbox": {
            "backend": {"use": "kubernetes:KubernetesBackend",
                        "kubeconfig": str(standin.kubeconfig), "node_host": "127.0.0.1",
                        "image": "all-in-one", "ready_timeout_seconds": 60},
            "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                          "path": str(root / "state" / "leases.db")},
            "base_dir": str(root / "state")}}))
        latencies = []
        try:
            for n in range(rounds):
                acquire = subprocess.Popen(
                    [sandboxctl, "--config", str(config), "--json", "acquire", "--user", "bench",
                     "--thread", f"t-{n}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True)
                name = None
                made_at = time.monotonic()
                while name is None and time.monotonic() - made_at < 30:
                    status, pods = standin.call("GET", "/api/v1/namespaces/sandboxes/pods")
                    names = [p["metadata"]["name"] for p in pods.get("items", [])]
                    name = names[0] if status == 200 and names else None
                    if name is None:
                        time.sleep(0.005)
                if name is None:
                    acquire.kill()
                    raise RuntimeError("the acquire made no pod: " + acquire.communicate()[1])
                made_at = time.monotonic()
                time.sleep(2.0 + (n + 0.5) / rounds)  # between 2 and 3 s after the pod was made
                ready_at = time.monotonic()
                standin.call("POST", f"/_standin/pods/sandboxes/{name}",
                             {"phase": "Running", "ready": True})
                out, err = acquire.communicate(timeout=60)
                returned_at = time.monotonic()
                if acquire.returncode != 0:
                    raise RuntimeError(f"acquire exited {acquire.returncode}: {err[-500:]}")
                latencies.append(returned_at - ready_at)
                sandbox_id = json.loads(out)["sandbox_id"]
                subprocess.run([sandboxctl, "--config", str(config), "destroy", sandbox_id],
                               capture_output=True, timeout=60, check=True)
        finally:
            standin.stop()
        return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxctl", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    rows = {}
    for label, forbid in (("watch", False), ("polling", True)):
        seconds = measure(args.sandboxctl, forbid, args.rounds)
        rows[label] = {"median_ms": round(statistics.median(seconds) * 1000, 1),
                       "worst_ms": round(max(seconds) * 1000, 1), "rounds": len(seconds)}
        print(f"[ kubernetes ] pod Ready to acquire returned, {label:>7}: "
              f"{rows[label]['median_ms']} ms median, {rows[label]['worst_ms']} ms worst "
              f"({len(seconds)} rounds)")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
