"""Issue 23's load target across processes: three whole gateways (``sandboxctl serve``) on one
engine share a lease store (a SQLite file; a real ``redis-server``) with ``replicas: 3`` and
``overflow_policy: wait``. Twelve conversations (4x the ceiling) arrive at once, four at each
gateway; each holds its sandbox briefly and destroys it. The ceiling is checked where it
matters, on the engine itself, sampled every 20 ms: containers that are created, running or
paused count; a stopped one the engine is still removing (destroy stops an AutoRemove
container, and Docker removes it a moment later) holds no process and does not. Every
conversation must be served and the store must hold no reservation at the end."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

import sandboxd
from conftest import engine_containers, engine_section

CEILING = 3
GONE_STATES = ("exited", "dead", "removing")  # stopped: no process, no CPU, no memory
GATEWAYS = 3
CONVERSATIONS = 4 * CEILING
REDIS_URL = os.environ.get("SANDBOXD_TEST_REDIS_URL", "")


def _store(kind: str, shared, prefix: str) -> dict:
    if kind == "sqlite":
        return {"use": "ownership_sqlite:SqliteOwnershipStore", "path": str(shared / "leases.db")}
    return {"use": "ownership_redis:RedisOwnershipStore", "url": REDIS_URL, "key_prefix": prefix}


def _reservations_left(kind: str, shared, prefix: str) -> int:
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(shared / "leases.db") as db:
            return db.execute("SELECT COUNT(*) FROM capacity").fetchone()[0]
    out = subprocess.run(["redis-cli", "-u", REDIS_URL, "ZCARD", f"{prefix}:capacity"],
                         check=True, capture_output=True, text=True).stdout
    return int(out.strip())


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_three_gateways_hold_one_ceiling_on_the_engine(store, make_serve, prefix, tmp_path):
    if store == "redis" and not REDIS_URL:
        pytest.skip("needs SANDBOXD_TEST_REDIS_URL (scripts/test.sh starts a redis-server)")
    shared = tmp_path / "shared"
    shared.mkdir()
    gateways = [
        make_serve(f"gateway-{n}", "--on-exit", "destroy", "--workers", "10", section=engine_section(
            prefix, tmp_path / f"gateway-{n}", _store(store, shared, prefix), replicas=CEILING,
            overflow_policy="wait", acquire_timeout=120))
        for n in range(GATEWAYS)
    ]

    most_on_engine = 0  # created, running or paused
    most_listed = 0  # in any state, stopped ones being removed included
    samples = 0
    sampling = threading.Event()

    def sample() -> None:
        nonlocal most_on_engine, most_listed, samples
        while not sampling.is_set():
            listed = engine_containers(prefix)
            most_listed = max(most_listed, len(listed))
            most_on_engine = max(most_on_engine,
                                 sum(1 for c in listed if c.get("State") not in GONE_STATES))
            samples += 1
            time.sleep(0.02)

    served: list[tuple[int, str]] = []
    failures: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CONVERSATIONS)

    def conversation(n: int) -> None:
        client = gateways[n % GATEWAYS].client(timeout=180)
        start.wait()
        try:
            got = client.acquire(f"t-{n}", user_id=f"user-{n}")
            time.sleep(0.2)  # a turn's work
            client.destroy(got.sandbox_id)
            with lock:
                served.append((n, got.path))
        except sandboxd.SandboxdError as e:
            with lock:
                failures.append(f"conversation {n}: {e}")

    sampler = threading.Thread(target=sample)
    sampler.start()
    began = time.monotonic()
    threads = [threading.Thread(target=conversation, args=(n,)) for n in range(CONVERSATIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    elapsed = time.monotonic() - began
    sampling.set()
    sampler.join()

    waits = sum(int(line.split()[-1]) for g in gateways for line in g.client().metrics().splitlines()
                if line.startswith("sandboxd_capacity_waits_total "))
    print(f"[ figures ] {store}: {GATEWAYS} gateways, {CONVERSATIONS} conversations at once, "
          f"replicas {CEILING}: served {len(served)} in {elapsed:.1f}s, {waits} waited; at most "
          f"{most_on_engine} live containers on the engine in {samples} samples ({most_listed} "
          "listed with stopped ones being removed)")
    assert failures == []
    assert len(served) == CONVERSATIONS
    assert samples > 10, "the engine was hardly sampled"
    assert most_on_engine <= CEILING, f"{most_on_engine} live containers on the engine at once"
    assert waits > 0, "nobody waited: the load did not reach the ceiling"
    assert _reservations_left(store, shared, prefix) == 0, "reservations leaked"
