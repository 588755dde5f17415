"""holdfast: a client for the holdfast distributed lock service.

Leases on named keys with owner tokens, fencing tokens, a renewing watchdog
that poisons the guard when the lease is lost, and Hybrid Logical Clock
stamps. asyncio first (AsyncClient), with a blocking client (Client) that
behaves the same::

    async with AsyncClient("http://127.0.0.1:7410") as client:
        async with client.lock("reports/daily", ttl=30) as guard:
            store.write(data, fence=guard.fencing_token)

This is a lease, not a mutex: a holder that overruns its TTL loses the lock
and someone else may run. Keep the TTL well above the work, let the watchdog
renew it, and fence writes with the token (see validate_write). The
behaviour (defaults, errors, retries) is the same in the Go and TypeScript
SDKs: docs/sdk-behaviour.md.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from ._async import DEFAULT_REQUEST_TIMEOUT, DEFAULT_RETRY_BUDGET, DEFAULT_TTL, AsyncClient, AsyncRWLock, LockContext
from ._durations import MIN_TTL, Duration
from ._election import AsyncElection, AsyncLeadership, CampaignContext
from ._guard import AsyncGuard
from ._options import Backoff, ExpiryMargin
from ._sync import Client, Election, Guard, Leadership, LockRequest, ObservationStream, RWLock, WatchStream
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
from .events import LeaseEvent, LeaseEventListener, LeaseEventType
from .fencing import validate_write
from .hlc import DEFAULT_MAX_OFFSET, Clock, Timestamp
from ._primitives import MAX_VALUE_BYTES
from .types import (
    BackendInfo,
    Grant,
    Inspection,
    KeyDelay,
    Kind,
    Leader,
    LockEvent,
    LockState,
    Mode,
    Observation,
    RunResult,
    ServerInfo,
)

try:
    __version__ = _version("holdfast")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_MAX_OFFSET",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_RETRY_BUDGET",
    "DEFAULT_TTL",
    "MAX_VALUE_BYTES",
    "MIN_TTL",
    "AsyncClient",
    "AsyncElection",
    "AsyncGuard",
    "AsyncLeadership",
    "AsyncRWLock",
    "BackendInfo",
    "Backoff",
    "CampaignContext",
    "CanceledError",
    "Client",
    "ClientClosedError",
    "Clock",
    "ClockOffsetError",
    "DeadlineExceededError",
    "Election",
    "Duration",
    "ExpiryMargin",
    "Grant",
    "Guard",
    "HoldfastError",
    "Inspection",
    "InvalidArgumentError",
    "KeyDelay",
    "Kind",
    "Leader",
    "LeaseEvent",
    "Leadership",
    "LeaseEventListener",
    "LeaseEventType",
    "LeaseLostError",
    "LeaseLostReason",
    "LockContext",
    "LockEvent",
    "LockReleasedError",
    "LockRequest",
    "LockState",
    "Mode",
    "NotAcquiredError",
    "Observation",
    "ObservationStream",
    "PermissionDeniedError",
    "RWLock",
    "ResourceExhaustedError",
    "RunResult",
    "ServerError",
    "ServerInfo",
    "StaleTokenError",
    "Timestamp",
    "UnauthenticatedError",
    "UnavailableError",
    "WatchStream",
    "__version__",
    "validate_write",
]
