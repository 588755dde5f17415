"""holdfast: a client for the holdfast distributed lock service.

Leases on named keys with owner tokens, fencing tokens, a renewing watchdog
that poisons the guard when the lease is lost, and Hybrid Logical Clock
stamps. asyncio first (AsyncClient), with a blocking wrapper (Client)::

    async with AsyncClient("http://127.0.0.1:7410") as client:
        async with client.lock("reports/daily", ttl=30) as guard:
            store.write(data, fence=guard.fencing_token)

This is a lease, not a mutex: a holder that overruns its TTL loses the lock
and someone else may run. Keep the TTL well above the work, let the watchdog
renew it, and fence writes with the token (see validate_write).
"""

from ._async import AsyncClient, AsyncGuard, LockContext
from ._sync import Client, Guard
from .errors import (
    CanceledError,
    ClientClosedError,
    ClockOffsetError,
    DeadlineExceededError,
    HoldfastError,
    InvalidArgumentError,
    LeaseLostError,
    LeaseLostReason,
    LockReleasedError,
    NotAcquiredError,
    PermissionDeniedError,
    ResourceExhaustedError,
    ServerError,
    StaleTokenError,
    UnauthenticatedError,
    UnavailableError,
)
from .fencing import validate_write
from .hlc import DEFAULT_MAX_OFFSET, Clock, Timestamp
from .types import BackendInfo, LockEvent, LockState, ServerInfo

__all__ = [
    "AsyncClient",
    "AsyncGuard",
    "BackendInfo",
    "CanceledError",
    "Client",
    "ClientClosedError",
    "Clock",
    "ClockOffsetError",
    "DEFAULT_MAX_OFFSET",
    "DeadlineExceededError",
    "Guard",
    "HoldfastError",
    "InvalidArgumentError",
    "LeaseLostError",
    "LeaseLostReason",
    "LockContext",
    "LockEvent",
    "LockReleasedError",
    "LockState",
    "NotAcquiredError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "ServerError",
    "ServerInfo",
    "StaleTokenError",
    "Timestamp",
    "UnauthenticatedError",
    "UnavailableError",
    "validate_write",
]
