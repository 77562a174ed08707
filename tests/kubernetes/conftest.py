"""The Kubernetes stand-in (tests/support/kube_standin.py) as a real child process serving HTTPS
on 127.0.0.1 with a bearer token, and a kubeconfig pointing at it, for the real clients."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[1] / "support" / "kube_standin.py"
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


class Standin:
    def __init__(self, directory: Path, *extra: str) -> None:
        self.directory = directory
        self.process = subprocess.Popen(
            [sys.executable, str(STANDIN), "--token", TOKEN, "--tls-dir", str(directory / "tls"),
             *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("listening "):
            self.process.kill()
            raise RuntimeError("the stand-in did not start: " + line + self.process.stderr.read())
        self.url = line.split()[1]
        self.ca = directory / "tls" / "ca.crt"
        self.kubeconfig = directory / "kubeconfig"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: standin\n  cluster:\n    server: {self.url}\n"
            f"    certificate-authority: {self.ca}\n"
            f"users:\n- name: tester\n  user:\n    token: {TOKEN}\n"
            "contexts:\n- name: standin\n  context: {cluster: standin, user: tester, "
            "namespace: sandboxes}\ncurrent-context: standin\n")

    def control(self, method: str, path: str, body: dict | None = None) -> dict:
        """The stand-in's own /_standin/ endpoints (what a test drives), over its TLS."""
        import json
        import ssl
        import urllib.request

        request = urllib.request.Request(
            self.url + path, method=method, data=json.dumps(body).encode() if body else None,
            headers={"Content-Type": "application/json"})
        context = ssl.create_default_context(cafile=str(self.ca))
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


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
