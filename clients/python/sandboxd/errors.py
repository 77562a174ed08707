"""Typed errors carrying the server's one-sentence message."""

from __future__ import annotations


class SandboxdError(Exception):
    """Any failure talking to ``sandboxctl serve``.

    ``status`` is the HTTP status (0 when no answer arrived), ``kind`` the server's error kind
    (``usage``, ``not_found``, ``ownership``, ``backend``, ``unauthorized``, ``internal``...).
    """

    def __init__(self, message: str, *, status: int = 0, kind: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind


class ConnectionFailed(SandboxdError):
    """The daemon could not be reached (socket missing, refused, timed out)."""


class InvalidRequest(SandboxdError):
    """400: a bad user id, thread id, sandbox id or body."""


class Unauthorized(SandboxdError):
    """401: the bearer token is missing or wrong."""


class NotFound(SandboxdError):
    """404: the sandbox is not tracked by the daemon."""


class OwnershipRefused(SandboxdError):
    """409: another instance holds the sandbox's lease or is tearing it down."""


class CapacityExceeded(SandboxdError):
    """429: a ceiling refused the sandbox (``replicas`` with ``overflow_policy``,
    ``max_per_user``, or a wait past ``acquire_timeout``); try again later. The message names the
    ceiling and the counts, e.g. ``capacity (per_user): user alice has 2 of max_per_user 2
    sandboxes, none of them released; ...``."""


class BackendFailure(SandboxdError):
    """502: the engine or provisioner failed."""


class ServerError(SandboxdError):
    """500 and anything else unexpected."""


_BY_STATUS = {
    400: InvalidRequest,
    401: Unauthorized,
    404: NotFound,
    409: OwnershipRefused,
    413: InvalidRequest,
    429: CapacityExceeded,
    502: BackendFailure,
}


def error_for(status: int, kind: str, message: str) -> SandboxdError:
    return _BY_STATUS.get(status, ServerError)(message, status=status, kind=kind)
