"""A client of ``sandboxctl serve``'s control API, standard library only."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from .errors import ConnectionFailed, SandboxdError, error_for

DEFAULT_TIMEOUT_SECONDS = 120.0  # an acquire may create a container and wait for it


def default_socket_path() -> str:
    """Where ``sandboxctl serve`` listens by default: the built-in state directory's socket."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, "sandboxd", "serve.sock")


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass(frozen=True)
class Acquired:
    sandbox_id: str
    sandbox_url: str
    # reused, reclaimed, resumed (thawed from paused), discovered, created, claimed or restored
    path: str
    # Headers every request to sandbox_url carries (a relay's token, for a sandbox without a
    # host address); DeerFlow's SandboxInfo.request_headers. Empty when none are needed.
    request_headers: dict[str, str] = field(default_factory=dict)



def _sandbox_path(sandbox_id: str, tail: str = "") -> str:
    """The route of one sandbox: its id is one path segment whatever it holds ('/', '?', '%'
    quoted), so a malformed id reaches the daemon's id check (400 naming it) instead of
    another route."""
    return "/v1/sandboxes/" + quote(sandbox_id, safe="") + tail


class Client:
    """One daemon, reached over its unix socket (``socket``) or ``http://127.0.0.1:PORT``
    (``url``, which needs ``token``). Safe to share between threads: each thread keeps its own
    connection."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        if socket_path and url:
            raise ValueError("give socket_path or url, not both")
        self._url = urlsplit(url) if url else None
        if self._url and (self._url.scheme != "http" or not self._url.hostname):
            raise ValueError(f"url must be http://HOST:PORT, got {url!r}")
        self._socket_path = None if url else (socket_path or default_socket_path())
        self._token = token
        self._timeout = timeout
        self._local = threading.local()
        self.requests_sent = 0  # for callers (and tests) that want to know

    @property
    def address(self) -> str:
        return self._url.geturl() if self._url else f"unix:{self._socket_path}"

    # ── the API ──
    def health(self) -> dict[str, Any]:
        return self._call("GET", "/v1/health")

    def acquire(self, thread_id: str | None = None, *, user_id: str | None = None,
                from_snapshot: str | None = None, snapshot_user_id: str | None = None,
                allow_other_user: bool = False) -> Acquired:
        """The conversation's sandbox; with ``from_snapshot`` made from that snapshot (path
        ``restored``: its old sandbox and directories replaced; another user's snapshot needs
        ``snapshot_user_id`` and ``allow_other_user``)."""
        # Naming the conversation makes an acquire idempotent (the same sandbox comes back);
        # an anonymous one makes a new sandbox each time it is served. A restore is not.
        body: dict[str, Any] = _acquire_body(thread_id, user_id)
        if from_snapshot is not None:
            body["from_snapshot"] = {"name": from_snapshot, "user_id": snapshot_user_id,
                                     "allow_other_user": allow_other_user}
        answer = self._call("POST", "/v1/sandboxes/acquire", body,
                            idempotent=thread_id is not None and from_snapshot is None)
        return Acquired(answer["sandbox_id"], answer["sandbox_url"], answer["path"],
                        dict(answer.get("request_headers") or {}))

    def start_acquire(self, thread_id: str | None = None, *,
                      user_id: str | None = None) -> PendingAcquire:
        """An acquire that can be given up: ``result()`` waits for it (on any thread) and
        ``cancel()`` hangs up on it, upon which the daemon takes it out of its queue for a slot
        (overflow_policy wait) at once instead of serving it later for nobody."""
        return PendingAcquire(self, thread_id, user_id)

    def get(self, sandbox_id: str) -> dict[str, Any]:
        return self._call("GET", _sandbox_path(sandbox_id))

    # ── snapshots (docs/snapshots.md) ──
    def snapshot(self, sandbox_id: str, name: str | None = None) -> dict[str, Any]:
        """Saves the sandbox (its filesystem changes and its conversation's directories)."""
        body = {"name": name} if name is not None else None
        return self._call("POST", _sandbox_path(sandbox_id, "/snapshots"), body)

    def snapshots(self, user_id: str | None = None) -> list[dict[str, Any]]:
        query = "?user_id=" + quote(user_id, safe="") if user_id is not None else ""
        return self._call("GET", "/v1/snapshots" + query)["snapshots"]

    def delete_snapshot(self, name: str, *, user_id: str) -> dict[str, Any]:
        return self._call("DELETE", "/v1/snapshots/" + quote(name, safe="") + "?user_id=" +
                          quote(user_id, safe=""))

    def fork(self, sandbox_id: str, thread_ids: list[str] | None = None, *,
             count: int | None = None) -> list[Acquired]:
        """New conversations of the sandbox's user, each with a sandbox made from its state as
        it is now (its own copy of the directories): ``thread_ids``, or ``count`` of them named
        for you. All or none; each comes back acquired (path ``restored``)."""
        body: dict[str, Any] = {}
        if thread_ids is not None:
            body["thread_ids"] = list(thread_ids)
        if count is not None:
            body["count"] = count
        answer = self._call("POST", _sandbox_path(sandbox_id, "/fork"), body)
        return [Acquired(made["sandbox_id"], made["sandbox_url"], made["path"],
                         dict(made.get("request_headers") or {}))
                for made in answer["sandboxes"]]

    def release(self, sandbox_id: str) -> dict[str, Any]:
        return self._call("POST", _sandbox_path(sandbox_id, "/release"))

    def destroy(self, sandbox_id: str) -> dict[str, Any]:
        return self._call("DELETE", _sandbox_path(sandbox_id))

    def list(self) -> dict[str, Any]:
        return self._call("GET", "/v1/sandboxes")

    def metrics(self) -> str:
        return self._request("GET", "/metrics", None)[1].decode()

    # ── egress (network mode allowlist): DeerFlow's network-policy calls ──
    def egress(self, sandbox_id: str) -> dict[str, Any]:
        """The sandbox's allow-list, pending requests and grants."""
        return self._call("GET", _sandbox_path(sandbox_id, "/egress"))

    def consume_network_policy_events(self, sandbox_id: str) -> list[dict[str, Any]]:
        """Refused requests waiting for a decision, each handed out once:
        ``{"request_id", "host", "port", "method"}``."""
        return self._call("POST", _sandbox_path(sandbox_id, "/egress/events"))["events"]

    def deny_pending_network_policy_events(self, sandbox_id: str) -> bool:
        return bool(self._call("POST", _sandbox_path(sandbox_id, "/egress/deny-pending"))["ok"])

    def decide_network_policy_request(self, sandbox_id: str, request_id: str,
                                      decision: str) -> bool:
        """``decision``: ``deny``, ``allow_temporary`` or ``allow_sandbox``. False when there is
        no such pending request."""
        return bool(self._call("POST", _sandbox_path(sandbox_id, "/egress/decide"),
                               {"request_id": request_id, "decision": decision})["ok"])

    def decide_network_domain(self, sandbox_id: str, domain: str, decision: str) -> bool:
        """The same decision for a name, pending or not (an operator's grant ahead of need)."""
        return bool(self._call("POST", _sandbox_path(sandbox_id, "/egress/decide"),
                               {"domain": domain, "decision": decision})["ok"])

    # ── plumbing ──
    def _new_connection(self) -> http.client.HTTPConnection:
        if self._url:
            return http.client.HTTPConnection(
                self._url.hostname, self._url.port or 80, timeout=self._timeout
            )
        return _UnixHTTPConnection(self._socket_path, self._timeout)

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._new_connection()
            self._local.connection = connection
        return connection

    def _encode(self, body: Any) -> tuple[dict[str, str], bytes | None]:
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers, payload

    def _request(self, method: str, path: str, body: Any,
                 idempotent: bool = True) -> tuple[int, bytes]:
        """One request. A kept-alive connection the server closed is retried once, but only
        for an idempotent call: a request that is not is sent on a fresh connection, once, and
        a broken connection then says it may have been served."""
        headers, payload = self._encode(body)
        if not idempotent:
            self._drop()
        for attempt in (1, 2) if idempotent else (2,):
            connection = self._connection()
            try:
                self.requests_sent += 1
                connection.request(method, path, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self._drop()
                return response.status, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop()
                if attempt == 2:
                    raise ConnectionFailed(
                        f"sandboxd at {self.address} closed the connection"
                        + ("" if idempotent else
                           f" after {method} {path} was sent; it may have been served (not "
                           "retried: it is not idempotent)"))
            except OSError as e:
                self._drop()
                raise ConnectionFailed(f"cannot reach sandboxd at {self.address}: {e}") from e
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _call(self, method: str, path: str, body: Any = None,
              idempotent: bool = True) -> dict[str, Any]:
        status, data = self._request(method, path, body, idempotent)
        return self._decode(method, path, status, data)

    def _decode(self, method: str, path: str, status: int, data: bytes) -> dict[str, Any]:
        try:
            document = json.loads(data.decode() or "{}")
        except ValueError as e:
            raise SandboxdError(
                f"sandboxd at {self.address} answered {method} {path} with HTTP {status} and "
                f"a body that is not JSON",
                status=status,
            ) from e
        if status >= 400:
            error = document.get("error", {}) if isinstance(document, dict) else {}
            raise error_for(status, error.get("kind", ""), error.get("message", f"HTTP {status}"))
        return document

    def close(self) -> None:
        self._drop()


def _acquire_body(thread_id: str | None, user_id: str | None) -> dict[str, str]:
    body: dict[str, str] = {}
    if thread_id is not None:
        body["thread_id"] = thread_id
    if user_id is not None:
        body["user_id"] = user_id
    return body


class PendingAcquire:
    """One acquire on a connection of its own (``Client.start_acquire``), so that ``cancel()``
    can hang up on it from another thread without touching any other call's connection."""

    def __init__(self, client: Client, thread_id: str | None, user_id: str | None) -> None:
        self._client = client
        self._body = _acquire_body(thread_id, user_id)
        self._connection = client._new_connection()
        self._lock = threading.Lock()  # guards _cancelled and the connection's socket
        self._cancelled = False

    def result(self) -> Acquired:
        """Sends the acquire and waits for its answer (blocking: run it on a worker thread)."""
        path = "/v1/sandboxes/acquire"
        headers, payload = self._client._encode(self._body)
        try:
            with self._lock:
                if self._cancelled:
                    raise ConnectionFailed("the acquire was cancelled before it was sent")
                self._connection.connect()
            self._client.requests_sent += 1
            self._connection.request("POST", path, body=payload, headers=headers)
            response = self._connection.getresponse()
            status, data = response.status, response.read()
        except OSError as e:
            raise ConnectionFailed(
                "the acquire was cancelled" if self._cancelled else
                f"cannot reach sandboxd at {self._client.address}: {e}") from e
        except http.client.HTTPException as e:
            raise ConnectionFailed(
                "the acquire was cancelled" if self._cancelled else
                f"sandboxd at {self._client.address} closed the connection: {e!r}") from e
        finally:
            self._connection.close()
        answer = self._client._decode("POST", path, status, data)
        return Acquired(answer["sandbox_id"], answer["sandbox_url"], answer["path"],
                        dict(answer.get("request_headers") or {}))

    def cancel(self) -> None:
        """Hangs up (idempotent; any thread). An acquire the daemon has already served stays
        served: the conversation's next acquire finds its sandbox."""
        with self._lock:
            self._cancelled = True
            sock = self._connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
