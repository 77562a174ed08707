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
    original = provider.client.acquire

    def acquire_after_the_loop_ran(*args, **kwargs):
        # Were acquire_async blocking the loop, the ticker could never set this: a deadlock,
        # caught by the bound below.
        assert loop_ran.wait(timeout=10), "the event loop did not run during acquire_async"
        return original(*args, **kwargs)

    provider.client.acquire = acquire_after_the_loop_ran

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
