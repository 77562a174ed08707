"""sandboxd: a client of ``sandboxctl serve`` and a DeerFlow sandbox provider on top of it."""

from .client import Acquired, Client, PendingAcquire, default_socket_path
from .errors import (
    BackendFailure,
    CapacityExceeded,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    OwnershipRefused,
    SandboxdError,
    ServerError,
    Unauthorized,
)

__all__ = [
    "Acquired",
    "BackendFailure",
    "CapacityExceeded",
    "Client",
    "ConnectionFailed",
    "InvalidRequest",
    "NotFound",
    "OwnershipRefused",
    "PendingAcquire",
    "SandboxdError",
    "ServerError",
    "Unauthorized",
    "default_socket_path",
]
