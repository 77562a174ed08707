"""The Kubernetes stand-in (tests/support/kube_standin.py) as a real child process serving HTTPS
on 127.0.0.1 with a bearer token, and a kubeconfig pointing at it, for the real clients."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from kube_standin_process import StandinProcess  # noqa: E402

TOKEN = "standin-token-1"


def kubectls() -> list[str]:
    """Every kubectl to check the stand-in with: Debian's (kubernetes-client, or extracted from
    its package by scripts/setup.sh where another package owns /usr/bin/kubectl) and the one on
    PATH, when they differ."""
    found = []
    debian = os.environ.get("SANDBOXD_DEBIAN_KUBECTL", "")
    if debian and os.access(debian, os.X_OK):
        found.append(debian)
    on_path = shutil.which("kubectl")
    if on_path and os.path.realpath(on_path) not in map(os.path.realpath, found):
        found.append(on_path)
    return found


class Standin(StandinProcess):
    def __init__(self, directory: Path, *extra: str) -> None:
        super().__init__(directory, *extra, token=TOKEN)

    def control(self, method: str, path: str, body: dict | None = None) -> dict:
        """The stand-in's own /_standin/ endpoints (what a test drives), over its TLS."""
        status, answer = self.call(method, path, body)
        if status >= 300:
            raise RuntimeError(f"the stand-in answered {method} {path} with {status}: {answer}")
        return answer


def started_standin(tmp_path, *, serving: bool = False, pending: bool = False,
                    terminating: bool = False):
    """A stand-in for one test, stopped after it.
    serving: NodePort services are backed by a real httpd on 127.0.0.1 (--serve-pods);
    pending: pods stay Pending until the test drives them;
    terminating: a deleted pod stays terminating, its name taken, for 2 s, as until a kubelet
    has stopped it (--kubelet-stop-seconds)."""
    extra = []
    if serving:
        extra += ["--serve-pods", str(tmp_path / "pods")]
    if pending:
        extra += ["--pods-start", "pending"]
    if terminating:
        extra += ["--kubelet-stop-seconds", "2"]
    started = Standin(tmp_path, *extra)
    yield started
    started.stop()


def standin_fixture(name: str, **flags: bool):
    @pytest.fixture(name=name)
    def fixture(tmp_path):
        yield from started_standin(tmp_path, **flags)
    return fixture


standin = standin_fixture("standin")
serving_standin = standin_fixture("serving_standin", serving=True)
serving_pending_standin = standin_fixture("serving_pending_standin", serving=True, pending=True)
pending_standin = standin_fixture("pending_standin", pending=True)
terminating_standin = standin_fixture("terminating_standin", terminating=True)
serving_terminating_standin = standin_fixture("serving_terminating_standin", serving=True,
                                              terminating=True)
