"""Fixtures: a real ``sandboxctl serve`` process on a real unix socket (or 127.0.0.1 with a
token) over the real engine the test run provides (SANDBOXD_TEST_DOCKER_SOCKET)."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandboxd  # noqa: E402

SANDBOXCTL = os.environ.get("SANDBOXCTL", "")
ENGINE_SOCKET = os.environ.get("SANDBOXD_TEST_DOCKER_SOCKET", "")
IMAGE = os.environ.get("SANDBOXD_TEST_IMAGE", "localhost/sandboxd-test-sandbox:latest")


def engine_section(prefix: str, state: Path, ownership: dict | None = None, **settings) -> dict:
    """A ``sandbox`` section over the test engine: local_docker with the test image and this
    test's container prefix, a SQLite lease file in ``state`` unless ``ownership`` is given,
    ``state`` as base_dir, and ``settings`` (replicas, overflow_policy...) beside them."""
    return {
        "backend": {"use": "local_docker:LocalContainerBackend",
                    "socket": f"unix://{ENGINE_SOCKET}", "image": IMAGE,
                    "container_prefix": prefix},
        "ownership": ownership or {"use": "ownership_sqlite:SqliteOwnershipStore",
                                   "path": str(state / "leases.db")},
        "base_dir": str(state),
        **settings,
    }


class EngineConnection(http.client.HTTPConnection):
    """HTTP to the test engine's API on its unix socket (ENGINE_SOCKET)."""

    def __init__(self, timeout: float = 10) -> None:
        super().__init__("engine", timeout=timeout)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(ENGINE_SOCKET)


def engine_containers(name_part: str) -> list[dict]:
    """Containers (any state) whose name contains ``name_part``, straight from the engine."""
    filters = urllib.parse.quote(json.dumps({"name": [name_part]}))
    conn = EngineConnection()
    conn.request("GET", f"/containers/json?all=true&filters={filters}")
    return json.loads(conn.getresponse().read())


def engine_exec(container: str, command: list[str]) -> tuple[int, str]:
    """Runs `command` in the container (its environment, HTTP_PROXY included); exit code and
    output."""
    conn = EngineConnection(timeout=60)
    conn.request("POST", f"/containers/{container}/exec",
                 json.dumps({"Cmd": command, "AttachStdout": True, "AttachStderr": True}),
                 {"Content-Type": "application/json"})
    exec_id = json.loads(conn.getresponse().read())["Id"]
    conn = EngineConnection(timeout=60)
    conn.request("POST", f"/exec/{exec_id}/start", json.dumps({"Detach": False, "Tty": False}),
                 {"Content-Type": "application/json"})
    raw = conn.getresponse().read()
    output = b""
    while len(raw) >= 8:  # the engine's multiplexed stream: 8-byte frame headers
        size = int.from_bytes(raw[4:8], "big")
        output += raw[8:8 + size]
        raw = raw[8 + size:]
    conn = EngineConnection(timeout=60)
    conn.request("GET", f"/exec/{exec_id}/json")
    code = json.loads(conn.getresponse().read())["ExitCode"]
    return code, output.decode(errors="replace")


def containers_left(name_part: str, within: float = 15.0) -> list[dict]:
    """The containers whose name contains ``name_part`` once the engine has had ``within``
    seconds to finish removing them: Docker removes a stopped container (AutoRemove) just
    after the stop answers, so a destroy that returned may still be listed for a moment."""
    deadline = time.monotonic() + within
    while (left := engine_containers(name_part)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


class Serve:
    """One ``sandboxctl serve`` child process."""

    def __init__(self, state: Path, prefix: str, *extra: str, env: dict | None = None,
                 section: dict | None = None) -> None:
        self.state = state
        self.prefix = prefix
        self.config = state / "sandboxd.json"
        state.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            json.dumps(
                {"sandbox": section} if section else {
                    "sandbox": {
                        "backend": {
                            "use": "local_docker:LocalContainerBackend",
                            "socket": f"unix://{ENGINE_SOCKET}",
                            "image": IMAGE,
                            "container_prefix": prefix,
                        },
                        "ownership": {
                            "use": "ownership_sqlite:SqliteOwnershipStore",
                            "path": str(state / "leases.db"),
                        },
                        "base_dir": str(state),
                    }
                }
            )
        )
        self.log = open(state / "serve.log", "ab")
        self.process = subprocess.Popen(
            [SANDBOXCTL, "--config", str(self.config), "serve", "--json", *extra],
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**os.environ, **(env or {})},
        )
        document = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline().decode()
            if not line:
                break
            document += line
            if line.startswith("}"):
                break
        if not document:
            raise RuntimeError(f"serve did not start; see {state / 'serve.log'}: "
                               + (state / "serve.log").read_text()[-2000:])
        self.info = json.loads(document)
        self.listen = self.info["listen"]

    def client(self, **kwargs) -> sandboxd.Client:
        if self.listen.startswith("unix:"):
            return sandboxd.Client(self.listen[len("unix:"):], **kwargs)
        return sandboxd.Client(url=self.listen, **kwargs)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=60)
        finally:
            self.log.close()


EXAMPLE_PLUGIN_DIR = os.environ.get("SANDBOXD_EXAMPLE_PLUGIN_DIR", "")


@pytest.fixture
def process_serve(tmp_path):
    """A serve over the example process_backend plugin (no engine), whose sandboxes start
    serving only once ``gate`` exists: a create that is slow for as long as a test wants."""
    if not SANDBOXCTL or not os.path.exists(os.path.join(EXAMPLE_PLUGIN_DIR, "process_backend.so")):
        pytest.skip("needs SANDBOXCTL and SANDBOXD_EXAMPLE_PLUGIN_DIR (ctest sets them)")
    gate = tmp_path / "gate"
    waiting = tmp_path / "waiting"
    wrapper = tmp_path / "gated-httpd"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"touch {waiting}\n"
        f"while [ ! -e {gate} ]; do sleep 0.02; done\n"
        'exec busybox httpd "$@"\n'
    )
    wrapper.chmod(0o755)
    section = {
        "backend": {"use": "process_backend:ProcessSandboxBackend",
                    "work_dir": str(tmp_path / "sandboxes"), "httpd_command": str(wrapper)},
        "ownership": {"use": "ownership_memory:MemoryOwnershipStore"},
        "base_dir": str(tmp_path / "state"),
        "plugin_dirs": [EXAMPLE_PLUGIN_DIR],
    }
    served = Serve(tmp_path / "state", "unused", "--on-exit", "destroy", section=section)
    served.gate = gate
    served.waiting = waiting
    yield served
    gate.touch()
    assert served.stop() == 0


@pytest.fixture
def engine_required():
    if not SANDBOXCTL or not ENGINE_SOCKET or not os.path.exists(ENGINE_SOCKET):
        pytest.skip("needs SANDBOXCTL and SANDBOXD_TEST_DOCKER_SOCKET (scripts/test.sh sets them)")


@pytest.fixture
def prefix():
    made = "pyt-" + secrets.token_hex(4)
    yield made
    # Snapshots outlive sandboxes by design (a snapshot is kept until deleted or expired), so a
    # test that stopped before deleting its own leaves their images behind its state
    # directory: removed here, whatever the test's outcome.
    if not ENGINE_SOCKET or not os.path.exists(ENGINE_SOCKET):
        return
    try:
        conn = EngineConnection()
        conn.request("GET", "/images/json")
        tags = [tag for image in json.loads(conn.getresponse().read())
                for tag in image.get("RepoTags") or [] if tag.startswith(f"localhost/{made}-snapshot:")]
        for tag in tags:
            conn = EngineConnection(timeout=60)
            conn.request("DELETE", f"/images/{urllib.parse.quote(tag, safe='')}?force=true")
            conn.getresponse().read()
    except OSError:
        pass


@pytest.fixture
def serve(engine_required, tmp_path, prefix):
    started = [Serve(tmp_path / "state", prefix, "--on-exit", "destroy")]
    yield started[0]
    for s in started:
        s.stop()
    assert containers_left(prefix) == [], "the serve under test left containers behind"


@pytest.fixture
def make_serve(engine_required, tmp_path, prefix):
    """Starts further serves; each is stopped (and checked) at the end."""
    made: list[Serve] = []

    def make(name: str, *extra: str, env: dict | None = None, section: dict | None = None) -> Serve:
        s = Serve(tmp_path / name, prefix, *extra, env=env, section=section)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()
