"""Exceptions of the holdfast SDK.

Every exception the SDK raises is a :class:`HoldfastError` whose ``code``
names the situation, with the same names in the Go and TypeScript SDKs
(docs/sdk-behaviour.md, Errors): Connect codes for what the server answered
(``invalid_argument``, ``unavailable``, ``unauthenticated``, ...), and SDK
codes for what the SDK decided (``not_acquired``, ``lease_lost``,
``lock_released``, ``client_closed``, ``stale_token``, ``clock_offset``).
Branch on the class or the code, never on the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from .types import KeyDelay, LockState

LeaseLostReason = Literal["rejected", "expired", "client_closed", "release_unconfirmed"]
"""Why a guard lost its lease (the same strings in every SDK):

- ``rejected``: the server answered extended=false or released=false; the
  owner token no longer holds the key.
- ``expired``: no renewal succeeded before the lease's local expiry on the
  client's monotonic clock (``__cause__``: the last renewal error, if any).
- ``client_closed``: the client was closed while the guard was held.
- ``release_unconfirmed``: unlock retried a release whose first attempt
  failed in transit, and the retry answered released=false. The token no
  longer holds the key either way, but the first attempt may well have been
  the one that released it, so this is not a proven loss during the
  critical section.
"""

_REASON_TEXT: dict[str, str] = {
    "rejected": "rejected by the server",
    "expired": "expired before a renewal succeeded",
    "client_closed": "client closed",
    "release_unconfirmed": "released=false after a release attempt that may have succeeded",
}


class HoldfastError(Exception):
    """Base class of every error the SDK raises; ``code`` names the situation."""

    code: str = "unknown"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NotAcquiredError(HoldfastError):
    """The key (or a key of a multi-key lock) is held by someone else, or
    stayed held for the whole wait.

    ``current`` is the holder's state when the server said who holds it;
    ``keys`` every key of a multi-key lock (None for one key); ``delay`` set
    when a key nobody held was in its lock-delay."""

    code = "not_acquired"

    def __init__(
        self,
        key: str,
        current: LockState | None,
        waited: float | None = None,
        *,
        keys: Sequence[str] | None = None,
        delay: KeyDelay | None = None,
    ) -> None:
        multi = tuple(keys) if keys is not None and len(keys) > 1 else None
        msg = f"holdfast: lock {list(multi) if multi else key!r} not acquired"
        if waited:
            msg += f" within the wait of {waited:g}s"
        rwlock = current is not None and current.kind == "rwlock"
        writer = next((g for g in current.holders if g.mode == "exclusive"), None) if current and rwlock else None
        if current is not None and current.kind == "semaphore":
            msg += (
                f": semaphore with {current.permits_in_use} of {current.limit} permits in use"
                f" by {len(current.holders)} holders"
            )
        elif writer is not None:
            msg += f": written by {writer.holder!r} (fencing token {writer.fencing_token})"
        elif current is not None and rwlock:
            msg += f": read by {len(current.holders)} holders"
        elif current is not None and current.kind == "election":
            msg += f": led by {current.holder!r} (term {current.fencing_token})"
        elif current is not None and multi:
            msg += f": {current.key!r} held by {current.holder!r} (fencing token {current.fencing_token})"
        elif current is not None:
            msg += f": held by {current.holder!r} (fencing token {current.fencing_token})"
        elif delay is not None:
            msg += f": {delay.key!r} is in its lock-delay ({delay.remaining:g}s left)"
        super().__init__(msg)
        self.key = key
        self.current = current
        self.keys: tuple[str, ...] | None = multi
        self.delay = delay


class LeaseLostError(HoldfastError):
    """The guard no longer holds its lease.

    What ``fencing_token``, ``extend()`` and ``unlock()`` raise once the lease
    is lost, and what lost callbacks receive. ``unlock()`` of a lost lease
    raises it: never a quiet success. Work done under the guard may overlap
    with the next holder's: fence your writes.
    """

    code = "lease_lost"

    def __init__(
        self,
        key: str,
        reason: LeaseLostReason,
        fencing_token: int | None = None,
        keys: Sequence[str] | None = None,
    ) -> None:
        token = "" if fencing_token is None else f" (fencing token {fencing_token})"
        what = f"{list(keys)!r}" if keys is not None else f"{key!r}{token}"
        super().__init__(f"holdfast: lease on {what} lost: {_REASON_TEXT.get(reason, reason)}")
        self.key = key
        """The lease's key (a multi-key lease's first key)."""
        self.keys: tuple[str, ...] | None = tuple(keys) if keys is not None else None
        """Every key of a multi-key lease; None for one key."""
        self.reason: LeaseLostReason = reason
        self.fencing_token = fencing_token


class LockReleasedError(HoldfastError):
    """The guard was unlocked by its owner; it no longer holds."""

    code = "lock_released"

    def __init__(self, key: str) -> None:
        super().__init__(f"holdfast: lock {key!r} was released")
        self.key = key


class StaleTokenError(HoldfastError):
    """A write carried a fencing token older than the resource's watermark."""

    code = "stale_token"

    def __init__(self, token: int, watermark: int) -> None:
        super().__init__(f"holdfast: stale fencing token {token}, the resource has seen {watermark}")
        self.token = token
        self.watermark = watermark


class ClientClosedError(HoldfastError):
    """The client was closed."""

    code = "client_closed"

    def __init__(self) -> None:
        super().__init__("holdfast: client closed")


class ClockOffsetError(HoldfastError):
    """A remote HLC stamp was too far ahead of the local clock."""

    code = "clock_offset"


class InvalidArgumentError(HoldfastError, ValueError):
    """The SDK (before sending) or the server refused an argument: bad key,
    TTL or wait out of range, malformed address, stamp too far ahead. The
    message names the field, the value and the limit."""

    code = "invalid_argument"


class UnavailableError(HoldfastError):
    """The server or its backend could not be reached (refused, reset, no
    answer in time) or is restarting, for longer than the call's budget."""

    code = "unavailable"


class DeadlineExceededError(HoldfastError, TimeoutError):
    """A deadline ran out: the server's, or a scheduled run's max_runtime."""

    code = "deadline_exceeded"


class CanceledError(HoldfastError):
    """The server reported the call canceled."""

    code = "canceled"


class UnauthenticatedError(HoldfastError):
    """The request carried no valid credentials (bearer token)."""

    code = "unauthenticated"


class PermissionDeniedError(HoldfastError):
    """The caller is authenticated but not allowed (key outside its token's namespaces)."""

    code = "permission_denied"


class ResourceExhaustedError(HoldfastError):
    """A server limit was hit (too many waiters, watch streams, requests)."""

    code = "resource_exhausted"


class ServerError(HoldfastError):
    """Any other failure the server reported; ``code`` is its Connect code
    (``failed_precondition``, ``unimplemented``, ``internal``, ...)."""


_BY_CODE: dict[Code, type[HoldfastError]] = {
    Code.INVALID_ARGUMENT: InvalidArgumentError,
    Code.OUT_OF_RANGE: InvalidArgumentError,
    Code.UNAVAILABLE: UnavailableError,
    Code.DEADLINE_EXCEEDED: DeadlineExceededError,
    Code.CANCELED: CanceledError,
    Code.UNAUTHENTICATED: UnauthenticatedError,
    Code.PERMISSION_DENIED: PermissionDeniedError,
    Code.RESOURCE_EXHAUSTED: ResourceExhaustedError,
}


def from_connect_error(err: BaseException, what: str) -> HoldfastError:
    """Maps what a Connect call raised to the SDK's exception classes; a
    transport failure the runtime did not wrap is ``unavailable``."""
    if isinstance(err, HoldfastError):
        return err
    if isinstance(err, ConnectError):
        cls = _BY_CODE.get(err.code, ServerError)
        exc = cls(f"holdfast: {what}: {err.message or err.code.value}", code=err.code.value)
    else:
        exc = UnavailableError(f"holdfast: {what}: {type(err).__name__}: {err}")
    exc.__cause__ = err
    return exc


def is_retryable(err: BaseException) -> bool:
    """Whether retrying may help: the server or the network may recover."""
    return isinstance(err, UnavailableError)
