"""`sandboxctl serve` on 127.0.0.1 over the in-process loopback_backend plugin, for the benches
that measure serve itself (load_daemons.py, relay_scale.py): its config written under `work`,
its log in `work/serve.log`, its token in the environment, and its start document read."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


def start_loopback_serve(sandboxctl: str, plugin_dir: str, work: Path, token: str, *,
                         replicas: int, namespaced: bool = False,
                         state: str = "state") -> tuple[subprocess.Popen, dict]:
    backend = {"use": "loopback_backend:LoopbackBackend"}
    if namespaced:
        backend["namespaced"] = True
    config = work / "serve.json"
    config.write_text(json.dumps({"sandbox": {
        "backend": backend,
        "ownership": {"use": "ownership_memory:MemoryOwnershipStore"},
        "base_dir": str(work / state), "replicas": replicas, "idle_timeout": 0,
        "plugin_dirs": [os.path.abspath(plugin_dir)]}}))
    log = open(work / "serve.log", "wb")
    process = subprocess.Popen(
        [sandboxctl, "--config", str(config), "--log-level", "warning", "serve", "--json",
         "--listen", "127.0.0.1:0", "--token-env", "SANDBOXD_BENCH_TOKEN", "--on-exit",
         "destroy"],
        stdout=subprocess.PIPE, stderr=log, env={**os.environ, "SANDBOXD_BENCH_TOKEN": token})
    document = ""
    while not document.rstrip().endswith("}"):
        line = process.stdout.readline().decode()
        if not line:
            raise RuntimeError("serve did not start: " + (work / "serve.log").read_text()[-2000:])
        document += line
    return process, json.loads(document)
