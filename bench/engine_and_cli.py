"""What the engine-side bench scripts share: HTTP to the test engine on its unix socket, a
command run inside a container, and one-shot `sandboxctl` commands (one process each, as an
operator's script runs them), timed from outside."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import time
from pathlib import Path


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=60)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def engine_call(sock: str, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    conn = UnixConnection(sock)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    answer = conn.getresponse()
    return answer.status, answer.read()


def engine_get(sock: str, path: str) -> dict:
    return json.loads(engine_call(sock, "GET", path)[1])


def run_in(sock: str, container: str, command: str) -> None:
    """Runs `sh -c command` in the container and waits for it."""
    _, body = engine_call(sock, "POST", f"/containers/{container}/exec",
                          {"Cmd": ["sh", "-c", command], "AttachStdout": True,
                           "AttachStderr": True})
    engine_call(sock, "POST", f"/exec/{json.loads(body)['Id']}/start",
                {"Detach": False, "Tty": False})


def sandboxctl(binary: str, config: Path, *words: str) -> dict:
    """One `sandboxctl --config CONFIG WORDS --json`; its answer, or {} when it printed none."""
    done = subprocess.run([binary, "--config", str(config), *words, "--json"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"sandboxctl {' '.join(words)}: {done.stderr.strip()}")
    return json.loads(done.stdout) if done.stdout.strip() else {}


def timed(binary: str, config: Path, *words: str) -> tuple[float, dict]:
    """sandboxctl(...) and the milliseconds it took."""
    started = time.monotonic()
    answer = sandboxctl(binary, config, *words)
    return (time.monotonic() - started) * 1000, answer
