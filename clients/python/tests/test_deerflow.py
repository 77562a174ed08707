"""SandboxdProvider: DeerFlow's SandboxProvider contract over a real serve process."""

from __future__ import annotations

import asyncio
import threading

import pytest

import sandboxd
from sandboxd.deerflow import SandboxHandle, SandboxdProvider


def test_provider_acquire_get_release_destroy(serve):
    provider = SandboxdProvider(serve.listen[len("unix:"):])
    sandbox_id = provider.acquire("t-1", user_id="dave")
    sandbox = provider.get(sandbox_id)
    assert isinstance(sandbox, SandboxHandle)  # DeerFlow is not installed here
    assert sandbox.id == sandbox_id and sandbox.base_url.startswith("http://")
    sent = provider.client.requests_sent
    for _ in range(100):
        assert provider.get(sandbox_id) is sandbox
    assert provider.client.requests_sent == sent, "get must answer from the local cache"
    assert provider.get("unknown") is None
    assert provider.uses_thread_data_mounts is True  # local_docker bind-mounts thread data
    provider.release(sandbox_id)
    assert provider.get(sandbox_id) is None
    assert provider.acquire("t-1", user_id="dave") == sandbox_id
    provider.destroy(sandbox_id)
    with pytest.raises(sandboxd.NotFound):
        provider.client.get(sandbox_id)


def test_provider_reads_the_socket_from_the_environment(serve, monkeypatch):
    monkeypatch.setenv("SANDBOXD_SOCKET", serve.listen[len("unix:"):])
    provider = SandboxdProvider()
    assert provider.client.health()["status"] == "ok"
    sandbox_id = provider.acquire("t-env", user_id="erin")
    provider.shutdown()  # releases to the daemon's warm pool
    assert sandboxd.Client(serve.listen[len("unix:"):]).get(sandbox_id)["state"] == "warm"


def test_async_acquire_does_not_block_the_event_loop(serve):
    provider = SandboxdProvider(serve.listen[len("unix:"):])
    loop_ran = threading.Event()
    original = provider.client.start_acquire

    def start_acquire_answering_after_the_loop_ran(*args, **kwargs):
        pending = original(*args, **kwargs)
        result = pending.result

        def result_after_the_loop_ran():
            # Were acquire_async blocking the loop, the ticker could never set this: a
            # deadlock, caught by the bound below.
            assert loop_ran.wait(timeout=10), "the event loop did not run during acquire_async"
            return result()

        pending.result = result_after_the_loop_ran
        return pending

    provider.client.start_acquire = start_acquire_answering_after_the_loop_ran

    async def ticker() -> None:
        await asyncio.sleep(0)
        loop_ran.set()

    async def main() -> str:
        acquisition = asyncio.create_task(provider.acquire_async("t-async", user_id="frank"))
        await ticker()
        return await asyncio.wait_for(acquisition, timeout=60)

    sandbox_id = asyncio.run(main())
    assert provider.get(sandbox_id) is not None
    provider.destroy(sandbox_id)


def test_a_cancelled_acquire_async_leaves_the_daemons_queue_at_once(make_serve, prefix, tmp_path):
    """Issue 23: under replicas 1 and overflow_policy wait, a DeerFlow task whose acquire_async
    queues for a slot is cancelled. The provider hangs up; serve sees it and the acquisition
    leaves the queue at once (not at acquire_timeout), so it never creates a sandbox for nobody
    and the next conversation gets the slot."""
    import time

    from conftest import engine_section

    state = tmp_path / "cancel"
    served = make_serve("cancel", "--on-exit", "destroy", "--workers", "4", section=engine_section(
        prefix, state, replicas=1, overflow_policy="wait", acquire_timeout=300))
    client = served.client()
    provider = SandboxdProvider(client=client)
    first = provider.acquire("t-1", user_id="alice")

    def queue_length() -> int:
        for line in client.metrics().splitlines():
            if line.startswith("sandboxd_capacity_queue_length "):
                return int(line.split()[-1])
        raise AssertionError("no sandboxd_capacity_queue_length in /metrics")

    async def main() -> None:
        waiting = asyncio.create_task(provider.acquire_async("t-2", user_id="bob"))
        deadline = time.monotonic() + 30
        while await asyncio.to_thread(queue_length) != 1:
            assert time.monotonic() < deadline, "the acquire never queued"
            await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
    deadline = time.monotonic() + 10  # far below acquire_timeout (300 s)
    while queue_length() != 0:
        assert time.monotonic() < deadline, "the cancelled acquire stayed in serve's queue"
        time.sleep(0.05)
    provider.release(first)
    third = client.acquire("t-3", user_id="carol")
    assert third.path == "created"
    threads = {s.get("thread_id") for s in client.list()["sandboxes"]}
    assert "t-2" not in threads, "the cancelled acquire still made its sandbox"
    assert "sandboxd_capacity_wait_seconds_count 1" in client.metrics()
