"""The Kubernetes stand-in (kube_standin.py beside this file) as a child process, over TLS with a
bearer token, with a kubeconfig pointing at it (context namespace: sandboxes); used by
tests/kubernetes and bench/kubernetes_*.py."""

from __future__ import annotations

import http.client
import json
import secrets
import ssl
import subprocess
import sys
from pathlib import Path

STANDIN = Path(__file__).resolve().parent / "kube_standin.py"


class StandinProcess:
    def __init__(self, directory: Path, *extra: str, token: str = "") -> None:
        self.directory = directory
        self.token = token or "standin-" + secrets.token_hex(8)
        self.process = subprocess.Popen(
            [sys.executable, str(STANDIN), "--token", self.token, "--tls-dir",
             str(directory / "tls"), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        line = self.process.stdout.readline()
        if not line.startswith("listening "):
            self.process.kill()
            raise RuntimeError("the stand-in did not start: " + line + self.process.stderr.read())
        self.url = line.split()[1]
        self.port = int(self.url.rsplit(":", 1)[1])
        self.ca = directory / "tls" / "ca.crt"
        self.kubeconfig = directory / "kubeconfig"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: standin\n"
            f"clusters:\n- name: standin\n  cluster: {{server: \"{self.url}\", "
            f"certificate-authority: {self.ca}}}\n"
            f"users:\n- name: tester\n  user: {{token: {self.token}}}\n"
            "contexts:\n- name: standin\n  context: {cluster: standin, user: tester, "
            "namespace: sandboxes}\n")

    def connection(self) -> http.client.HTTPSConnection:
        """A connection to keep alive over many requests."""
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=ssl.create_default_context(cafile=str(self.ca)),
            timeout=60)

    def request(self, connection: http.client.HTTPSConnection, method: str, path: str,
                body: dict | None = None) -> tuple[int, dict]:
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers={"Authorization": f"Bearer {self.token}",
                                    "Content-Type": "application/json"})
        answer = connection.getresponse()
        data = answer.read()
        try:
            return answer.status, json.loads(data) if data else {}
        except ValueError:
            return answer.status, {}

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """One request on a connection of its own."""
        connection = self.connection()
        try:
            return self.request(connection, method, path, body)
        finally:
            connection.close()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
