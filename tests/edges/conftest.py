"""Fixtures for the edge tests: the real ``sandboxctl`` and ``sandboxd-provisioner``
binaries over the example process backend (no engine), driven by hostile clients on unix
sockets and 127.0.0.1. ctest provides SANDBOXCTL, SANDBOXD_PROVISIONER and
SANDBOXD_EXAMPLE_PLUGIN_DIR."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

SANDBOXCTL = os.environ.get("SANDBOXCTL", "")
PROVISIONER = os.environ.get("SANDBOXD_PROVISIONER", "")
EXAMPLE_PLUGIN_DIR = os.environ.get("SANDBOXD_EXAMPLE_PLUGIN_DIR", "")


def needs_binaries() -> None:
    if not SANDBOXCTL or not os.path.exists(os.path.join(EXAMPLE_PLUGIN_DIR, "process_backend.so")):
        pytest.skip("needs SANDBOXCTL and SANDBOXD_EXAMPLE_PLUGIN_DIR (ctest sets them)")


def process_section(tmp: Path, state: Path, **extra) -> dict:
    """A sandbox section over the example process backend with SQLite leases in `state`."""
    section = {
        "backend": {"use": "process_backend:ProcessSandboxBackend",
                    "work_dir": str(tmp / "sandboxes")},
        "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                      "path": str(tmp / "leases.db")},
        "base_dir": str(state),
        "plugin_dirs": [EXAMPLE_PLUGIN_DIR],
    }
    section.update(extra)
    return section


def write_config(path: Path, section: dict) -> Path:
    path.write_text(json.dumps({"sandbox": section}))
    return path


def run_ctl(config: Path, *args: str, env: dict | None = None, timeout: float = 60):
    """Runs one sandboxctl command; returns (exit code, stdout, stderr)."""
    done = subprocess.run([SANDBOXCTL, "--config", str(config), *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout, done.stderr


class Serve:
    """One ``sandboxctl serve`` child process; `info` is its start-up JSON document."""

    def __init__(self, config: Path, *extra: str, log: Path, env: dict | None = None,
                 expect_start: bool = True) -> None:
        self.log_path = log
        self.log = open(log, "ab")
        self.process = subprocess.Popen(
            [SANDBOXCTL, "--config", str(config), "serve", "--json", *extra],
            stdout=subprocess.PIPE, stderr=self.log, env={**os.environ, **(env or {})})
        self.info: dict = {}
        if not expect_start:
            return
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
            raise RuntimeError("serve did not start: " + log.read_text()[-2000:])
        self.info = json.loads(document)
        self.listen = self.info["listen"]

    def socket_path(self) -> str:
        assert self.listen.startswith("unix:")
        return self.listen[len("unix:"):]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.log.close()


@pytest.fixture
def binaries():
    needs_binaries()


@pytest.fixture
def serves():
    """Starts serves; each still running at the end is stopped."""
    started: list[Serve] = []

    def start(*args, **kwargs) -> Serve:
        s = Serve(*args, **kwargs)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.process.poll() is None:
            s.process.kill()
            s.process.wait()
        s.log.close()
