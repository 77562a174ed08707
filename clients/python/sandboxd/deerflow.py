"""A DeerFlow sandbox provider backed by ``sandboxctl serve``.

In DeerFlow's ``config.yaml``::

    sandbox:
      use: sandboxd.deerflow:SandboxdProvider
      sandboxd_socket: /var/lib/sandboxd/serve.sock   # or sandboxd_url + sandboxd_token_env

DeerFlow constructs the provider without arguments, so it reads those extra keys of its
``sandbox`` section (DeerFlow's SandboxConfig keeps unknown keys), then the environment
(``SANDBOXD_SOCKET``, ``SANDBOXD_URL``, ``SANDBOXD_TOKEN``), then the daemon's default socket.

When ``deerflow`` is importable the class subclasses DeerFlow's ``SandboxProvider`` and ``get``
returns DeerFlow's own ``AioSandbox(id, base_url)`` (with ``request_headers=`` when the daemon
hands a sandbox out through its relay: network mode ``isolated``); without it, a
``SandboxHandle`` with ``id``, ``base_url`` and ``request_headers``. DeerFlow without an importable ``AioSandbox`` (its ``agent-sandbox``
dependency missing) is refused at construction with ``DeerFlowSandboxUnavailable``. The daemon owns the sandboxes' lifecycle (warm pool, idle reaping, leases):
``shutdown`` releases what this process acquired to the daemon's warm pool rather than
destroying it, and ``reset`` only forgets this process's cache.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from .client import Acquired, Client

try:  # DeerFlow is optional: the provider works (and is tested) without it.
    from deerflow.sandbox.sandbox_provider import SandboxProvider as _ProviderBase

    _HAVE_DEERFLOW = True
except ImportError:  # pragma: no cover - exercised when DeerFlow is installed
    _ProviderBase = object  # type: ignore[assignment,misc]
    _HAVE_DEERFLOW = False

_AIO_SANDBOX_IMPORT_ERROR: ImportError | None = None
try:
    from deerflow.community.aio_sandbox.aio_sandbox import AioSandbox as _DeerFlowSandbox
except ImportError as error:
    _DeerFlowSandbox = None
    _AIO_SANDBOX_IMPORT_ERROR = error


class DeerFlowSandboxUnavailable(ImportError):
    """DeerFlow is installed but its ``AioSandbox`` cannot be imported.

    ``get`` would then hand DeerFlow's tools a ``SandboxHandle``, which has no
    ``execute_command``: they would fail later with an ``AttributeError``. The provider refuses
    at construction instead, naming the module that is missing.
    """


@dataclass(frozen=True)
class SandboxHandle:
    """What ``get`` returns without DeerFlow: enough to reach the sandbox's HTTP API (send
    ``request_headers`` with every request: a relay's token, for a sandbox without a host
    address)."""

    id: str
    base_url: str
    request_headers: dict[str, str] = field(default_factory=dict)


def _takes_request_headers(sandbox_class: Any) -> bool:
    """Whether DeerFlow's ``AioSandbox`` takes ``request_headers`` (DeerFlow's network modes,
    its #5152): then every request it makes carries them without DeerFlow changes."""
    try:
        return "request_headers" in inspect.signature(sandbox_class).parameters
    except (TypeError, ValueError):
        return False


def _deerflow_sandbox_section() -> Any:
    try:
        from deerflow.config import get_app_config
    except ImportError:
        return None
    try:
        return get_app_config().sandbox
    except Exception:  # no config.yaml: fall back to the environment
        return None


def _setting(section: Any, key: str) -> str | None:
    if section is None:
        return None
    value = getattr(section, key, None)
    if value is None and hasattr(section, "model_extra"):
        value = (section.model_extra or {}).get(key)
    return str(value) if value else None


def _temporary_grant_ttl(section: Any) -> int:
    """DeerFlow's sandbox.network.temporary_grant_ttl (300 when unset), as serve enforces it."""
    network = getattr(section, "network", None) if section is not None else None
    value = getattr(network, "temporary_grant_ttl", None) if network is not None else None
    if value is None and isinstance(network, dict):
        value = network.get("temporary_grant_ttl")
    try:
        return int(value) if value is not None else 300
    except (TypeError, ValueError):
        return 300


# The network modes whose sandboxes are reached only through sandboxd's relay, each with the
# sentence a DeerFlow that cannot send the relay's token is refused with.
_RELAYED_MODES = {
    "isolated": (
        "sandboxd runs network mode isolated: its sandboxes have no network and are reached only "
        "through its relay, with a token on every request, and this DeerFlow's AioSandbox takes "
        "no request_headers (DeerFlow before its network modes): upgrade DeerFlow, or set "
        "sandbox.network.mode open; nothing was acquired"),
    "allowlist": (
        "sandboxd runs network mode allowlist: its sandboxes reach only allowed names through its "
        "egress proxy and are reached only through its relay, with a token on every request, and "
        "this DeerFlow's AioSandbox takes no request_headers (DeerFlow before its network modes): "
        "upgrade DeerFlow, or set sandbox.network.mode open; nothing was acquired"),
}


class SandboxdProvider(_ProviderBase):  # type: ignore[misc,valid-type]
    """DeerFlow's SandboxProvider contract over one ``sandboxctl serve`` daemon."""

    def __init__(
        self,
        socket_path: str | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        client: Client | None = None,
        **_ignored: Any,
    ) -> None:
        if _HAVE_DEERFLOW and _DeerFlowSandbox is None:
            missing = getattr(_AIO_SANDBOX_IMPORT_ERROR, "name", None) or "unknown"
            raise DeerFlowSandboxUnavailable(
                "DeerFlow is installed but deerflow.community.aio_sandbox.aio_sandbox.AioSandbox "
                f"cannot be imported (missing module {missing!r}: install DeerFlow's "
                "'agent-sandbox' dependency into this environment); without it the sandboxes "
                f"this provider returns have no execute_command: {_AIO_SANDBOX_IMPORT_ERROR}"
            )
        if client is None:
            section = _deerflow_sandbox_section() if not (socket_path or url) else None
            socket_path = socket_path or _setting(section, "sandboxd_socket")
            url = url or _setting(section, "sandboxd_url")
            token_env = _setting(section, "sandboxd_token_env") or "SANDBOXD_TOKEN"
            token = token or os.environ.get(token_env)
            if not socket_path and not url:
                url = os.environ.get("SANDBOXD_URL")
                socket_path = None if url else os.environ.get("SANDBOXD_SOCKET")
            client = Client(socket_path, url=url, token=token)
        self._client = client
        self._temporary_grant_ttl = _temporary_grant_ttl(_deerflow_sandbox_section())
        self._lock = threading.Lock()  # guards _sandboxes
        self._sandboxes: dict[str, Any] = {}
        self._mounts: bool | None = None
        # The daemon's network mode when its sandboxes are reached only through the relay, ""
        # when not; asked once, and only of a DeerFlow that could not use the relay.
        self._relayed_mode: str | None = None

    @property
    def client(self) -> Client:
        return self._client

    # ── DeerFlow's SandboxProvider ──
    def acquire(self, thread_id: str | None = None, *, user_id: str | None = None) -> str:
        self._refuse_relayed_modes_this_deerflow_cannot_use()
        return self._track(self._client.acquire(thread_id, user_id=user_id))

    async def acquire_async(self, thread_id: str | None = None, *, user_id: str | None = None) -> str:
        await asyncio.to_thread(self._refuse_relayed_modes_this_deerflow_cannot_use)
        # A task cancelled while the daemon queues this acquire for a slot hangs up on it, so
        # the daemon drops it from the queue at once instead of serving it later for nobody.
        pending = self._client.start_acquire(thread_id, user_id=user_id)
        try:
            acquired = await asyncio.to_thread(pending.result)
        except asyncio.CancelledError:
            pending.cancel()
            raise
        return self._track(acquired)

    def _refuse_relayed_modes_this_deerflow_cannot_use(self) -> None:
        """A DeerFlow whose AioSandbox takes no request_headers cannot reach a sandbox through
        sandboxd's relay: refused before anything is acquired (before, the daemon acquired the
        sandbox and it stayed active, unreleased, until its idle timeout)."""
        if _DeerFlowSandbox is None or _takes_request_headers(_DeerFlowSandbox):
            return
        if self._relayed_mode is None:
            health = getattr(self._client, "health", None)  # an injected client may have none
            if health is None:
                return
            try:
                mode = str(health().get("network_mode") or "open")
            except Exception:  # not known now: the answer's headers decide (_track)
                return
            self._relayed_mode = mode if mode in _RELAYED_MODES else ""
        if self._relayed_mode:
            raise DeerFlowSandboxUnavailable(_RELAYED_MODES[self._relayed_mode])

    def _track(self, acquired: Acquired) -> str:
        # A client of its own (the `client=` injection) may predate request_headers.
        headers = dict(getattr(acquired, "request_headers", None) or {})
        if _DeerFlowSandbox is None:
            sandbox = SandboxHandle(acquired.sandbox_id, acquired.sandbox_url, headers)
        elif headers and _takes_request_headers(_DeerFlowSandbox):
            sandbox = _DeerFlowSandbox(acquired.sandbox_id, acquired.sandbox_url,
                                       request_headers=headers)
        elif headers:
            # Open mode without a published port: found out only now. Given back at once, so
            # it is not left active for nobody.
            try:
                self._client.release(acquired.sandbox_id)
            except Exception:  # the daemon's idle reaping is the fallback
                pass
            raise DeerFlowSandboxUnavailable(
                "sandbox " + acquired.sandbox_id + " is reached through sandboxd's relay, which "
                "needs its token on every request, and this DeerFlow's AioSandbox takes no "
                "request_headers (DeerFlow before its network modes): upgrade DeerFlow, or "
                "publish its port (sandbox.network.publish true); it was released")
        else:
            sandbox = _DeerFlowSandbox(acquired.sandbox_id, acquired.sandbox_url)
        with self._lock:
            self._sandboxes[acquired.sandbox_id] = sandbox
        return acquired.sandbox_id

    def get(self, sandbox_id: str) -> Any | None:
        """From this process's cache only: called on DeerFlow's event loop, it never waits."""
        with self._lock:
            return self._sandboxes.get(sandbox_id)

    def release(self, sandbox_id: str) -> None:
        with self._lock:
            self._sandboxes.pop(sandbox_id, None)
        self._client.release(sandbox_id)

    def reset(self) -> None:
        with self._lock:
            self._sandboxes.clear()

    # ── what DeerFlow's AioSandboxProvider has besides ──
    def destroy(self, sandbox_id: str) -> None:
        with self._lock:
            self._sandboxes.pop(sandbox_id, None)
        self._client.destroy(sandbox_id)

    def shutdown(self) -> None:
        with self._lock:
            ids = list(self._sandboxes)
            self._sandboxes.clear()
        for sandbox_id in ids:
            try:
                self._client.release(sandbox_id)
            except Exception:  # the daemon reaps what it cannot be told about
                pass
        self._client.close()

    # ── DeerFlow's network-policy calls (its sandbox.network modes) ──
    def sandbox_network_mode(self) -> str:
        return str(self._client.health().get("network_mode") or "open")

    def sandbox_network_temporary_grant_ttl(self) -> int:
        return self._temporary_grant_ttl

    def consume_network_policy_events(self, sandbox_id: str) -> list[dict[str, object]]:
        if self.sandbox_network_mode() != "allowlist":
            return []
        return self._client.consume_network_policy_events(sandbox_id)

    async def consume_network_policy_events_async(self, sandbox_id: str) -> list[dict[str, object]]:
        return await asyncio.to_thread(self.consume_network_policy_events, sandbox_id)

    def deny_pending_network_policy_events(self, sandbox_id: str) -> bool:
        if self.sandbox_network_mode() != "allowlist":
            return True
        return self._client.deny_pending_network_policy_events(sandbox_id)

    async def deny_pending_network_policy_events_async(self, sandbox_id: str) -> bool:
        return await asyncio.to_thread(self.deny_pending_network_policy_events, sandbox_id)

    def decide_network_policy_request(self, sandbox_id: str, request_id: str, decision: str) -> bool:
        if decision not in ("deny", "allow_temporary", "allow_sandbox"):
            return False
        return self._client.decide_network_policy_request(sandbox_id, request_id, decision)

    async def decide_network_policy_request_async(self, sandbox_id: str, request_id: str,
                                                  decision: str) -> bool:
        return await asyncio.to_thread(self.decide_network_policy_request, sandbox_id, request_id,
                                       decision)

    # ── snapshots and forks: an extension DeerFlow's own provider does not have ──
    def snapshot(self, sandbox_id: str, name: str | None = None) -> dict[str, Any]:
        """Saves the sandbox's state (what it wrote in its container and its conversation's
        directories) under ``name`` (one is given when omitted); the snapshot's record."""
        return self._client.snapshot(sandbox_id, name)

    def snapshots(self, user_id: str | None = None) -> list[dict[str, Any]]:
        return self._client.snapshots(user_id)

    def delete_snapshot(self, name: str, *, user_id: str) -> dict[str, Any]:
        return self._client.delete_snapshot(name, user_id=user_id)

    def acquire_from_snapshot(self, thread_id: str, name: str, *, user_id: str | None = None,
                              snapshot_user_id: str | None = None,
                              allow_other_user: bool = False) -> str:
        """The conversation's sandbox made from snapshot ``name`` (its old sandbox and files
        replaced); tracked as ``acquire`` tracks one, so ``get`` answers for it."""
        self._refuse_relayed_modes_this_deerflow_cannot_use()
        return self._track(self._client.acquire(
            thread_id, user_id=user_id, from_snapshot=name, snapshot_user_id=snapshot_user_id,
            allow_other_user=allow_other_user))

    def fork(self, sandbox_id: str, thread_ids: list[str] | None = None, *,
             count: int | None = None) -> list[str]:
        """New conversations of the sandbox's user from its state now, each with its own
        sandbox and copy of the files (``thread_ids``, or ``count`` named for you); their
        sandbox ids, each tracked as ``acquire`` tracks one. All or none."""
        self._refuse_relayed_modes_this_deerflow_cannot_use()
        return [self._track(made) for made in self._client.fork(sandbox_id, thread_ids,
                                                                 count=count)]

    @property
    def uses_thread_data_mounts(self) -> bool:  # type: ignore[override]
        if self._mounts is None:
            self._mounts = bool(self._client.health().get("uses_thread_data_mounts", False))
        return self._mounts
