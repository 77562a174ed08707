"""Issue 20 A.3, A.4, A.5 and B: slow, silent, greedy and unauthenticated clients against the
real daemons (`sandboxctl serve`, `sandboxd-provisioner`) over the example process backend.
None of them may keep a client with credentials out, keep a daemon from stopping, or crash it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import EXAMPLE_PLUGIN_DIR, PROVISIONER, process_section, write_config
from http_util import raw_socket, request

TOKEN = "tok-" + os.urandom(6).hex()
KEY = "key-" + os.urandom(6).hex()


class SlowClients:
    """`count` connections that send a request head one byte every `interval` seconds and
    never finish it (a slowloris), from one thread."""

    def __init__(self, listen: str, count: int, interval: float = 1.0,
                 head: bytes = b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n") -> None:
        self.sockets: list[socket.socket] = []
        for _ in range(count):
            try:
                s = raw_socket(listen, timeout=5)
                s.setblocking(False)
                self.sockets.append(s)
            except OSError:
                break
        self.head = head
        self.interval = interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        position = 0
        while not self.stop.wait(self.interval):
            byte = self.head[position % len(self.head):position % len(self.head) + 1]
            position += 1
            for s in list(self.sockets):
                try:
                    s.send(byte)
                except OSError:
                    self.sockets.remove(s)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.sockets:
            s.close()


def start_serve(tmp_path: Path, serves, *extra: str, listen_tcp: bool = True, env: dict | None = None,
                on_exit: str = "destroy"):
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, tmp_path / "state"))
    args = ["--on-exit", on_exit, *extra]
    environment = dict(env or {})
    if listen_tcp:
        args += ["--listen", "127.0.0.1:0", "--token-env", "EDGE_TOKEN"]
        environment["EDGE_TOKEN"] = TOKEN
    return serves(config, *args, log=tmp_path / "serve.log", env=environment)


def auth() -> dict:
    return {"Authorization": f"Bearer {TOKEN}"}


# ── A.3: slow clients without a token cannot keep the token holder out ─────────────────────

def test_slow_unauthenticated_clients_never_keep_a_token_holder_out_of_serve(binaries, tmp_path, serves):
    served = start_serve(tmp_path, serves, "--max-connections", "256")
    slow = SlowClients(served.listen, 300, interval=1.0)
    try:
        time.sleep(2.5)  # every slow client is in and has sent a few bytes
        started = time.monotonic()
        status, body, _ = request(served.listen, "GET", "/v1/sandboxes", headers=auth(), timeout=10)
        took = time.monotonic() - started
        assert status == 200, body
        assert took < 5, f"the token holder waited {took:.1f}s"
        # And a health check, which needs no token, gets through as well.
        assert request(served.listen, "GET", "/v1/health", timeout=10)[0] == 200
    finally:
        slow.close()
    assert served.stop() == 0


def test_a_request_head_must_arrive_whole_within_its_deadline(binaries, tmp_path, serves):
    """One byte a second keeps a socket's receive timer alive forever; the head's deadline is
    for the whole head (10 s)."""
    served = start_serve(tmp_path, serves)
    slow = SlowClients(served.listen, 1, interval=0.5)
    try:
        s = slow.sockets[0]
        deadline = time.monotonic() + 20
        closed_after = None
        while time.monotonic() < deadline:
            time.sleep(0.25)
            try:
                if s.recv(1, socket.MSG_DONTWAIT) == b"":
                    closed_after = time.monotonic() - (deadline - 20)
                    break
            except BlockingIOError:
                continue
            except OSError:
                closed_after = time.monotonic() - (deadline - 20)
                break
        assert closed_after is not None, "a trickling client held its connection for 20 s"
        assert closed_after < 13, closed_after
    finally:
        slow.close()
    assert served.stop() == 0


def test_credentials_are_checked_before_the_body_is_read(binaries, tmp_path, serves):
    served = start_serve(tmp_path, serves)
    s = raw_socket(served.listen, timeout=5)
    s.sendall(b"POST /v1/sandboxes/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 60000\r\n\r\n")  # and no body, ever
    answer = s.recv(4096)
    s.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert served.stop() == 0


def test_slow_clients_without_the_key_never_starve_the_provisioner(binaries, tmp_path):
    if not PROVISIONER:
        pytest.skip("needs SANDBOXD_PROVISIONER")
    process = start_provisioner(tmp_path)
    try:
        listen = process.listen
        slow = SlowClients(listen, 40, interval=1.0,
                           head=b"GET /api/sandboxes HTTP/1.1\r\nHost: x\r\n")
        try:
            time.sleep(2.5)
            started = time.monotonic()
            assert request(listen, "GET", "/health", timeout=10)[0] == 200
            status, body, _ = request(listen, "GET", "/api/sandboxes", headers={"X-API-Key": KEY},
                                      timeout=10)
            assert status == 200, body
            assert time.monotonic() - started < 5
        finally:
            slow.close()
    finally:
        assert process.stop() == 0


# ── A.4 and C: SIGTERM under abuse ──────────────────────────────────────────────────────

def test_sigterm_under_abuse_exits_within_the_grace_and_hands_every_sandbox_over(binaries, tmp_path, serves):
    """Stuck readers (slowloris), a writer that never reads (pipelined requests whose answers
    fill the socket), and a create in flight that finishes during the grace period: serve
    exits within the grace plus one second, answers the create, writes its registry, and the
    next serve takes every sandbox over."""
    gate = tmp_path / "gate"
    waiting = tmp_path / "waiting"
    wrapper = tmp_path / "gated-httpd"
    wrapper.write_text("#!/bin/sh\n"
                       f"touch {waiting}\n"
                       f"while [ ! -e {gate} ]; do sleep 0.02; done\n"
                       'exec busybox httpd "$@"\n')
    wrapper.chmod(0o755)
    section = process_section(tmp_path, tmp_path / "state")
    section["backend"]["httpd_command"] = str(wrapper)
    config = write_config(tmp_path / "cfg.json", section)
    served = serves(config, "--shutdown-grace", "3", log=tmp_path / "serve.log")
    listen = served.listen
    gate.touch()
    status, first, _ = request(listen, "POST", "/v1/sandboxes/acquire",
                               {"user_id": "u1", "thread_id": "t1"})
    assert status == 200, first
    gate.unlink()
    waiting.unlink()

    in_flight: list = []
    creator = threading.Thread(target=lambda: in_flight.append(request(
        listen, "POST", "/v1/sandboxes/acquire", {"user_id": "u1", "thread_id": "t2"},
        timeout=30)))
    creator.start()
    for _ in range(500):
        if waiting.exists():
            break
        time.sleep(0.01)
    assert waiting.exists(), "the second create never started"

    slow = SlowClients(listen, 50, interval=0.5)
    greedy = raw_socket(listen)
    greedy.setblocking(False)
    pipeline = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n" * 5000
    sent = 0
    deadline = time.monotonic() + 5
    while sent < len(pipeline) and time.monotonic() < deadline:
        try:
            sent += greedy.send(pipeline[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.05)
    time.sleep(0.5)

    started = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    gate.touch()  # the create in flight finishes inside the grace period
    try:
        rc = served.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("serve was still running 15 s after SIGTERM")
    took = time.monotonic() - started
    creator.join(timeout=10)
    slow.close()
    greedy.close()
    print(f"[ shutdown under abuse ] exit {rc} {took:.2f}s after SIGTERM (grace 3 s) with 50 "
          f"slow readers, a writer that never reads and a create in flight")
    assert rc == 0
    assert took < 3 + 1, f"stopping took {took:.1f}s with a 3 s grace"
    assert in_flight and in_flight[0][0] == 200, in_flight
    second = in_flight[0][1]["sandbox_id"]
    registry = json.loads((tmp_path / "state" / "serve-registry.json").read_text())
    assert sorted(s["sandbox_id"] for s in registry["sandboxes"]) == sorted(
        [first["sandbox_id"], second])
    nxt = serves(config, "--on-exit", "destroy", log=tmp_path / "serve2.log")
    assert nxt.info["inherited_active"] == 2
    assert nxt.stop() == 0


# ── A.5: no thread to be had is a 503, never a crash ───────────────────────────────────────

PIDS_ROOT = Path("/sys/fs/cgroup/pids")


def pids_cgroup(tmp_path: Path) -> Path:
    if os.geteuid() != 0 or not (PIDS_ROOT / "cgroup.procs").exists():
        pytest.skip("needs root and the cgroup v1 pids controller")
    group = PIDS_ROOT / ("sandboxd-edge-" + tmp_path.name[-12:] + str(os.getpid()))
    group.mkdir()
    return group


def test_serve_answers_503_and_keeps_serving_when_no_thread_can_be_started(binaries, tmp_path):
    group = pids_cgroup(tmp_path)
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, tmp_path / "state"))
    from conftest import SANDBOXCTL
    log = open(tmp_path / "serve.log", "ab")
    process = subprocess.Popen(
        [SANDBOXCTL, "--config", str(config), "serve", "--json", "--on-exit", "destroy",
         "--listen", f"unix:{tmp_path / 's.sock'}", "--workers", "64"],
        stdout=subprocess.PIPE, stderr=log,
        preexec_fn=lambda: (PIDS_ROOT / group.name / "cgroup.procs").write_text(str(os.getpid())))
    try:
        line = ""
        while not line.startswith("}"):
            line = process.stdout.readline().decode()
            assert line, (tmp_path / "serve.log").read_text()
        listen = f"unix:{tmp_path / 's.sock'}"
        # Not one thread more than serve has now: its first request finds no worker.
        (group / "pids.max").write_text((group / "pids.current").read_text().strip())
        status, body, _ = request(listen, "GET", "/v1/health")
        assert status == 503, body
        assert "no worker thread could be started" in body["error"]["message"], body
        # One thread more: one worker serves many connections with slow requests at once.
        (group / "pids.max").write_text(str(int((group / "pids.current").read_text()) + 1))
        results: list[int] = []

        def one() -> None:
            try:
                results.append(request(listen, "GET", "/v1/sandboxes", timeout=20)[0])
            except OSError:
                results.append(-1)

        clients = [threading.Thread(target=one) for _ in range(100)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        assert process.poll() is None, "serve died: " + (tmp_path / "serve.log").read_text()[-2000:]
        assert results.count(200) == 100, results
        (group / "pids.max").write_text("max")
        assert request(listen, "GET", "/v1/health")[0] == 200
    finally:
        (group / "pids.max").write_text("max")
        process.send_signal(signal.SIGTERM)
        rc = process.wait(timeout=30)
        log.close()
        time.sleep(0.2)
        group.rmdir()
    assert rc == 0


# ── the provisioner ────────────────────────────────────────────────────────────────────────

class Provisioner:
    def __init__(self, tmp_path: Path, env: dict | None = None, preexec=None, *extra: str,
                 config: dict | None = None) -> None:
        section = {
            "api_key": KEY,
            "host_base_dir": str(tmp_path / "pstate"),
            "plugin_dirs": [EXAMPLE_PLUGIN_DIR],
            "backend": {"use": "process_backend:ProcessSandboxBackend",
                        "work_dir": str(tmp_path / "psandboxes")},
        }
        section.update(config or {})
        config = tmp_path / "provisioner.json"
        config.write_text(json.dumps({"provisioner": section}))
        self.log = open(tmp_path / "provisioner.log", "ab")
        self.process = subprocess.Popen(
            [PROVISIONER, "--config", str(config), "--listen", "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE, stderr=self.log, env={**os.environ, **(env or {})},
            preexec_fn=preexec)
        line = self.process.stdout.readline().decode().strip()
        assert line.startswith("listening on "), (tmp_path / "provisioner.log").read_text()
        self.listen = line[len("listening on "):]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        finally:
            self.log.close()


def start_provisioner(tmp_path: Path, *extra: str, preexec=None) -> Provisioner:
    return Provisioner(tmp_path, None, preexec, *extra)


def test_the_provisioner_survives_a_pids_limit_and_answers_503(binaries, tmp_path):
    if not PROVISIONER:
        pytest.skip("needs SANDBOXD_PROVISIONER")
    group = pids_cgroup(tmp_path)
    procs = str(PIDS_ROOT / group.name / "cgroup.procs")
    p = start_provisioner(tmp_path, preexec=lambda: Path(procs).write_text(str(os.getpid())))
    try:
        (group / "pids.max").write_text((group / "pids.current").read_text().strip())
        status, body, _ = request(p.listen, "GET", "/health")
        assert status == 503 and "no worker thread" in body["detail"], body
        # A worker, but no thread for the backend call it makes.
        (group / "pids.max").write_text(str(int((group / "pids.current").read_text()) + 1))
        status, body, _ = request(p.listen, "GET", "/api/sandboxes", headers={"X-API-Key": KEY})
        assert status == 503 and "no thread for the backend call" in body["detail"], body
        results: list[int] = []

        def one() -> None:
            try:
                results.append(request(p.listen, "GET", "/api/sandboxes",
                                       headers={"X-API-Key": KEY}, timeout=20)[0])
            except OSError:
                results.append(-1)

        clients = [threading.Thread(target=one) for _ in range(60)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        assert p.process.poll() is None, (tmp_path / "provisioner.log").read_text()[-2000:]
        assert set(results) <= {200, 503}, results
        (group / "pids.max").write_text("max")
        assert request(p.listen, "GET", "/api/sandboxes", headers={"X-API-Key": KEY})[0] == 200
    finally:
        (group / "pids.max").write_text("max")
        rc = p.stop()
        time.sleep(0.2)
        group.rmdir()
    assert rc == 0, "the provisioner did not stop cleanly (a backend call that never started?)"


# ── Issue 32 A.1: what one request may buffer is bounded, chunk extensions and trailers too ─

def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def send_endless(listen: str, head: bytes, filler: bytes, total: int) -> tuple[int, bytes]:
    """Sends `head`, then `filler` repeated up to `total` bytes, as fast as the daemon reads;
    returns how many filler bytes went out before the daemon stopped reading or closed, and
    what it answered."""
    s = raw_socket(listen, timeout=10)
    s.sendall(head)
    block = filler * (65536 // len(filler))
    sent = 0
    try:
        while sent < total:
            sent += s.send(block)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    answer = b""
    try:
        s.settimeout(5)
        while len(answer) < 4096:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    s.close()
    return sent, answer


ENDLESS = 64 * 1024 * 1024


def endless_requests(method: bytes, path: bytes, credential: bytes) -> dict[str, bytes]:
    head = (method + b" " + path + b" HTTP/1.1\r\nHost: x\r\n" + credential +
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    return {
        # One chunk-size line that never ends: an extension of 64 MiB.
        "chunk extension": head + b"1;ext=",
        # A body that ends, then trailers that never do.
        "trailer": head + b"2\r\n{}\r\n0\r\nX-Trailer: ",
    }


def assert_bounded(pid: int, listen: str, method: bytes, path: bytes, credential: bytes) -> None:
    for kind, head in endless_requests(method, path, credential).items():
        before = rss_kib(pid)
        sent, answer = send_endless(listen, head, b"a", ENDLESS)
        grew = (rss_kib(pid) - before) / 1024
        status_line = answer.split(b"\r\n", 1)[0]
        print(f"[ endless {kind} ] {sent / 2**20:.1f} MiB taken, RSS +{grew:.1f} MiB, "
              f"answered {status_line!r}")
        assert grew < 8, f"{kind}: the daemon grew {grew:.1f} MiB for {sent / 2**20:.1f} MiB sent"
        assert sent < 8 * 1024 * 1024, f"{kind}: the daemon read {sent / 2**20:.1f} MiB of it"
        assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 413", b"HTTP/1.1 431")), answer[:200]


def test_chunk_extensions_and_endless_trailers_are_bounded_on_serve(binaries, tmp_path, serves):
    served = start_serve(tmp_path, serves)
    pid = served.process.pid
    bearer = f"Authorization: Bearer {TOKEN}\r\n".encode()
    assert_bounded(pid, served.listen, b"POST", b"/v1/sandboxes/acquire", bearer)
    # Without credentials, on the route that needs none.
    assert_bounded(pid, served.listen, b"GET", b"/v1/health", b"")
    status, body, _ = request(served.listen, "GET", "/v1/sandboxes", headers=auth())
    assert status == 200, body
    assert served.stop() == 0


def test_chunk_extensions_and_endless_trailers_are_bounded_on_the_provisioner(binaries, tmp_path):
    if not PROVISIONER:
        pytest.skip("needs SANDBOXD_PROVISIONER")
    p = start_provisioner(tmp_path)
    try:
        key = f"X-API-Key: {KEY}\r\n".encode()
        assert_bounded(p.process.pid, p.listen, b"POST", b"/api/sandboxes", key)
        assert_bounded(p.process.pid, p.listen, b"GET", b"/health", b"")
        status, body, _ = request(p.listen, "GET", "/api/sandboxes", headers={"X-API-Key": KEY})
        assert status == 200, body
    finally:
        assert p.stop() == 0


# ── Issue 32 A.3: routes without credentials never hold the connection slots ────────────────

def hold_public_routes(listen: str, count: int, head: bytes) -> list[socket.socket]:
    held = []
    for _ in range(count):
        try:
            s = raw_socket(listen, timeout=5)
            s.sendall(head)
            held.append(s)
        except OSError:
            break
    return held


def test_public_routes_take_no_body_and_never_fill_serves_slots(binaries, tmp_path, serves):
    served = start_serve(tmp_path, serves, "--max-connections", "16")
    # A public route with a declared body is refused before one body byte is read.
    s = raw_socket(served.listen, timeout=5)
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    answer = s.recv(4096)
    s.close()
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 413")), answer[:200]
    held = hold_public_routes(served.listen, 16 + 8,
                              b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    try:
        for attempt in range(3):
            status, body, _ = request(served.listen, "GET", "/v1/sandboxes", headers=auth(), timeout=10)
            assert status == 200, (attempt, body)
    finally:
        for s in held:
            s.close()
    assert served.stop() == 0


def test_public_routes_never_fill_the_provisioners_slots(binaries, tmp_path):
    if not PROVISIONER:
        pytest.skip("needs SANDBOXD_PROVISIONER")
    p = Provisioner(tmp_path, config={"max_connections": 16})
    try:
        held = hold_public_routes(p.listen, 16 + 8,
                                  b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        try:
            for attempt in range(3):
                status, body, _ = request(p.listen, "GET", "/api/sandboxes",
                                          headers={"X-API-Key": KEY}, timeout=10)
                assert status == 200, (attempt, body)
        finally:
            for s in held:
                s.close()
    finally:
        assert p.stop() == 0


# ── Issue 32 B: a kept-alive connection's next head has the head deadline, not the idle one ──

def test_a_kept_alive_connections_next_head_must_arrive_within_the_head_deadline(
        binaries, tmp_path, serves):
    served = start_serve(tmp_path, serves)
    s = raw_socket(served.listen, timeout=5)
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
    first = s.recv(4096)
    assert first.startswith(b"HTTP/1.1 200"), first[:200]
    # The next request starts at once and then trickles: its head has 10 s, not 30.
    started = time.monotonic()
    s.setblocking(False)
    head = b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
    closed_after = None
    position = 0
    while time.monotonic() - started < 25:
        try:
            s.send(head[position % len(head):position % len(head) + 1])
            position += 1
        except OSError:
            closed_after = time.monotonic() - started
            break
        time.sleep(0.5)
        try:
            if s.recv(1) == b"":
                closed_after = time.monotonic() - started
                break
        except BlockingIOError:
            pass
        except OSError:
            closed_after = time.monotonic() - started
            break
    s.close()
    assert closed_after is not None, "a trickling kept-alive head held its connection for 25 s"
    assert closed_after < 13, closed_after
    assert served.stop() == 0
