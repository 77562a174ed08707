"""Plain HTTP/1.1 requests over a unix socket or TCP, with a deadline, for the edge tests."""

from __future__ import annotations

import http.client
import json
import socket


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 10) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def connection(listen: str, timeout: float = 10) -> http.client.HTTPConnection:
    if listen.startswith("unix:"):
        return UnixConnection(listen[len("unix:"):], timeout)
    host_port = listen.split("//", 1)[-1]
    host, port = host_port.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def request(listen: str, method: str, target: str, body=None, headers: dict | None = None,
            timeout: float = 10):
    """Returns (status, parsed JSON body or text, headers)."""
    conn = connection(listen, timeout)
    try:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        conn.request(method, target, body=data, headers=headers or {})
        response = conn.getresponse()
        raw = response.read().decode()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        return response.status, parsed, dict(response.getheaders())
    finally:
        conn.close()


def raw_socket(listen: str, timeout: float = 10) -> socket.socket:
    if listen.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(listen[len("unix:"):])
        return s
    host_port = listen.split("//", 1)[-1]
    host, port = host_port.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)
