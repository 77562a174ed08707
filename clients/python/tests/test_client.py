"""The control API through the Python client against a real serve process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import sandboxd
from conftest import containers_left, engine_containers


def test_acquire_get_release_reclaim_destroy(serve):
    client = serve.client()
    health = client.health()
    assert health["status"] == "ok" and health["active"] == 0

    first = client.acquire("t-1", user_id="alice")
    assert first.path == "created"
    with urllib.request.urlopen(first.sandbox_url + "/v1/sandbox", timeout=5) as answer:
        assert answer.status == 200
    assert client.acquire("t-1", user_id="alice") == sandboxd.Acquired(
        first.sandbox_id, first.sandbox_url, "reused")
    got = client.get(first.sandbox_id)
    assert got["state"] == "active" and got["user_id"] == "alice" and got["thread_id"] == "t-1"

    released = client.release(first.sandbox_id)
    assert released["state"] == "warm" and released["result"] == "released"
    listing = client.list()
    rows = {row["sandbox_id"]: row for row in listing["sandboxes"]}
    assert rows[first.sandbox_id]["state"] == "warm"
    assert rows[first.sandbox_id]["lease"]["ours"] is True
    assert client.acquire("t-1", user_id="alice").path == "reclaimed"

    assert client.destroy(first.sandbox_id)["result"] == "destroyed"
    with pytest.raises(sandboxd.NotFound) as missing:
        client.get(first.sandbox_id)
    assert missing.value.status == 404 and "is not tracked" in missing.value.message

    metrics = client.metrics()
    for line in ('sandboxd_acquires_total{path="created"} 1',
                 'sandboxd_acquires_total{path="reused"} 1',
                 'sandboxd_acquires_total{path="reclaimed"} 1',
                 "sandboxd_releases_total 1", "sandboxd_destroys_total 1",
                 "sandboxd_readiness_waits_total 1", "sandboxd_active_sandboxes 0",
                 'sandboxd_acquire_duration_seconds_bucket{le="+Inf"} 3'):
        assert line in metrics.splitlines(), line


def test_errors_map_to_typed_exceptions_with_the_servers_message(serve):
    client = serve.client()
    with pytest.raises(sandboxd.InvalidRequest) as bad:
        client.acquire("a/../b", user_id="alice")
    assert bad.value.status == 400 and "thread_id: Invalid thread_id" in bad.value.message
    assert "'a/../b'" in bad.value.message
    with pytest.raises(sandboxd.NotFound):
        client.release("0000000000000000")
    with pytest.raises(sandboxd.InvalidRequest):
        client.get("no.such/id")
    # Malformed and oversized bodies, straight over the socket.
    status, body = client._request("POST", "/v1/sandboxes/acquire", "not an object")
    assert status == 400 and "not a JSON object" in json.loads(body)["error"]["message"]
    status, _ = client._request("POST", "/v1/sandboxes/acquire", {"x": "y" * 70000})
    assert status == 413
    with pytest.raises(sandboxd.ConnectionFailed):
        sandboxd.Client(str(serve.state / "nothing.sock")).health()


def test_tcp_needs_the_bearer_token(make_serve, tmp_path):
    token = "t0k3n-" + os.urandom(8).hex()
    served = make_serve("tcp", "--listen", "127.0.0.1:0", "--token-env", "SBX_TOKEN",
                        env={"SBX_TOKEN": token})
    assert served.listen.startswith("http://127.0.0.1:")
    assert served.client(token=token).health()["status"] == "ok"
    for wrong in (None, "nope", token + "x"):
        with pytest.raises(sandboxd.Unauthorized):
            served.client(token=wrong).list()
    log = (served.state / "serve.log").read_bytes()
    assert token.encode() not in log, "the token reached the log"
    # Without a token a TCP serve refuses to start.
    refused = subprocess.run([os.environ["SANDBOXCTL"], "--config", str(served.config), "serve",
                              "--listen", "127.0.0.1:0"], capture_output=True, text=True)
    assert refused.returncode in (2, 6), refused.stderr


def test_two_processes_acquiring_one_conversation_get_one_sandbox(serve):
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import sandboxd;"
        "print(sandboxd.Client(sys.argv[2]).acquire('shared', user_id='bob').sandbox_id)"
    )
    package = str(Path(__file__).resolve().parents[1])
    socket_path = serve.listen[len("unix:"):]
    children = [subprocess.Popen([sys.executable, "-c", code, package, socket_path],
                                 stdout=subprocess.PIPE, text=True) for _ in range(2)]
    ids = [child.communicate(timeout=60)[0].strip() for child in children]
    assert all(child.returncode == 0 for child in children)
    assert ids[0] == ids[1] and ids[0]
    assert len(engine_containers(f"{serve.prefix}-{ids[0]}")) == 1


def test_a_restarted_serve_takes_over_what_the_last_one_left_running(make_serve, prefix):
    first = make_serve("restart")
    acquired = first.client().acquire("t-keep", user_id="carol")
    assert first.stop() == 0
    assert len(engine_containers(f"{prefix}-{acquired.sandbox_id}")) == 1, "left running"
    second = make_serve("restart", "--on-exit", "destroy")
    assert second.info["inherited_active"] == 1
    assert second.client().acquire("t-keep", user_id="carol").path == "reused"
    assert second.stop() == 0
    assert containers_left(prefix) == [], "--on-exit destroy left a container"


def test_a_second_serve_on_the_same_state_directory_is_refused(serve):
    second = subprocess.run([os.environ["SANDBOXCTL"], "--config", str(serve.config), "serve",
                             "--listen", "unix:" + str(serve.state / "other.sock")],
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 6
    assert f"pid {serve.info['pid']}" in second.stderr


def test_a_slow_create_never_holds_up_another_conversation(process_serve):
    client = process_serve.client(timeout=10)  # a server that queued us behind the slow create
                                               # would time this client out
    process_serve.gate.touch()
    fast = client.acquire("t-fast", user_id="gina")
    process_serve.gate.unlink()
    process_serve.waiting.unlink()

    slow_result: list = []
    slow = threading.Thread(
        target=lambda: slow_result.append(process_serve.client().acquire("t-slow", user_id="gina")))
    slow.start()
    for _ in range(500):  # the slow sandbox's server has started and waits at the gate
        if process_serve.waiting.exists():
            break
        time.sleep(0.01)
    assert process_serve.waiting.exists(), "the slow create never started"

    # Another conversation is served while the slow create is still in flight.
    assert client.release(fast.sandbox_id)["state"] == "warm"
    assert client.acquire("t-fast", user_id="gina").path == "reclaimed"
    assert client.health()["active"] == 1
    assert slow.is_alive(), "the slow create finished early: the test proved nothing"

    process_serve.gate.touch()
    slow.join(timeout=60)
    assert not slow.is_alive()
    assert slow_result and slow_result[0].path == "created"


class _HangUpServer:
    """A unix-socket server that reads each request whole and closes the connection without
    answering: what a client sees when the daemon served its request and the connection broke
    before the answer arrived. Counts the requests that reached it."""

    def __init__(self, path: Path) -> None:
        import socket as socket_module
        self.path = path
        self.requests: list[bytes] = []
        self._listener = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(body) < length:
                    body += connection.recv(65536)
                self.requests.append(head.split(b"\r\n")[0])

    def close(self) -> None:
        self._listener.close()


def test_only_idempotent_calls_are_retried_after_a_broken_connection(tmp_path):
    """Issue 20 A.12: an anonymous acquire whose connection broke after the daemon read it may
    have made a sandbox; sending it again would make a second one. It is sent once and fails
    saying so; calls that name their conversation or sandbox are retried once."""
    server = _HangUpServer(tmp_path / "hangup.sock")
    try:
        client = sandboxd.Client(str(server.path), timeout=5)
        with pytest.raises(sandboxd.ConnectionFailed) as anonymous:
            client.acquire()
        assert len(server.requests) == 1, server.requests
        assert "may have been served" in anonymous.value.message
        for call in (lambda: client.acquire("t-1", user_id="alice"), lambda: client.get("abc"),
                     lambda: client.release("abc"), lambda: client.destroy("abc"), client.list):
            before = len(server.requests)
            with pytest.raises(sandboxd.ConnectionFailed):
                call()
            assert len(server.requests) == before + 2, server.requests[before:]
    finally:
        server.close()


def test_a_ceiling_refuses_with_429_as_capacity_exceeded(make_serve, prefix, tmp_path):
    """Issue 23: replicas 1 with overflow_policy reject; the second conversation is refused
    with a typed exception naming the ceiling, and is served once the first is released."""
    from conftest import engine_section

    state = tmp_path / "ceiling"
    served = make_serve("ceiling", "--on-exit", "destroy", section=engine_section(
        prefix, state, replicas=1, overflow_policy="reject"))
    client = served.client()
    first = client.acquire("t-1", user_id="alice")
    with pytest.raises(sandboxd.CapacityExceeded) as refused:
        client.acquire("t-2", user_id="bob")
    assert refused.value.status == 429 and refused.value.kind == "capacity"
    assert "the deployment holds 1 of 1 replica slots (this gateway: 1 active" in refused.value.message
    assert 'sandboxd_capacity_rejections_total{reason="capacity"} 1' in client.metrics()
    client.release(first.sandbox_id)
    assert client.acquire("t-2", user_id="bob").path == "created"


def test_waiters_never_take_the_worker_a_release_needs(make_serve, prefix, tmp_path):
    """Issue 23, overflow_policy wait under serve --workers 2: one acquire may queue (half the
    workers); the next is refused at once with queue_full; the release is served by the free
    worker and hands the slot to the waiter."""
    from conftest import engine_section

    state = tmp_path / "queue"
    served = make_serve("queue", "--on-exit", "destroy", "--workers", "2", section=engine_section(
        prefix, state, replicas=1, overflow_policy="wait", acquire_timeout=60))
    first = served.client().acquire("t-1", user_id="alice")
    waiter: dict = {}

    def wait_for_slot() -> None:
        try:
            waiter["acquired"] = served.client().acquire("t-2", user_id="bob")
        except sandboxd.SandboxdError as e:  # pragma: no cover - reported by the assert below
            waiter["error"] = e

    thread = threading.Thread(target=wait_for_slot)
    thread.start()
    deadline = time.monotonic() + 10
    while "capacity_queue_length 1" not in served.client().metrics():
        assert time.monotonic() < deadline, "the second acquire never queued"
        time.sleep(0.05)
    with pytest.raises(sandboxd.CapacityExceeded) as refused:
        served.client().acquire("t-3", user_id="carol")
    assert "capacity (queue_full): 1 creations already wait for a slot" in refused.value.message
    served.client().release(first.sandbox_id)
    thread.join(timeout=60)
    assert "error" not in waiter, waiter.get("error")
    assert waiter["acquired"].path == "created"
    metrics = served.client().metrics()  # one wait ended (queue_full never queued)
    assert 'sandboxd_capacity_wait_seconds_bucket{le="+Inf"} 1' in metrics, metrics
    assert "sandboxd_capacity_wait_seconds_count 1" in metrics, metrics
