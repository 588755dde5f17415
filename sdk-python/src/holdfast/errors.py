"""Exceptions of the holdfast SDK.

Branch on the class, never on the message. Errors the server reported carry
their Connect code name in ``code`` (for example ``"unavailable"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from connectrpc.code import Code
from connectrpc.errors import ConnectError

if TYPE_CHECKING:
    from .types import LockState

LeaseLostReason = Literal["rejected", "expired", "client_closed", "release_unconfirmed"]
"""Why a guard lost its lease (the Go SDK's LossReason):

- ``rejected``: the server answered extended=false or released=false; the
  owner token no longer holds the key.
- ``expired``: no renewal succeeded before the lease's expiry on the client's
  monotonic clock (``__cause__``: the last renewal error, if any).
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
    """Base class of every error the SDK raises."""

    code: Optional[str] = None

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NotAcquiredError(HoldfastError):
    """The key is held by someone else, or stayed held for the whole wait."""

    def __init__(self, key: str, current: Optional[LockState]) -> None:
        msg = f"holdfast: lock {key!r} not acquired"
        if current is not None:
            msg += f": held by {current.holder!r} (fencing token {current.fencing_token})"
        super().__init__(msg)
        self.key = key
        self.current = current


class LeaseLostError(HoldfastError):
    """The guard no longer holds its lease.

    What ``fencing_token``, ``extend()`` and ``unlock()`` raise once the lease
    is lost, and what lost callbacks receive. ``unlock()`` of a lost lease
    raises it: never a quiet success (etcd#22082). Work done under the guard
    may overlap with the next holder's: fence your writes.
    """

    def __init__(self, key: str, reason: LeaseLostReason, fencing_token: Optional[int] = None) -> None:
        token = "" if fencing_token is None else f" (fencing token {fencing_token})"
        super().__init__(f"holdfast: lease on {key!r}{token} lost: {_REASON_TEXT.get(reason, reason)}")
        self.key = key
        self.reason: LeaseLostReason = reason
        self.fencing_token = fencing_token


class LockReleasedError(HoldfastError):
    """The guard was unlocked by its owner; it no longer holds."""

    def __init__(self, key: str) -> None:
        super().__init__(f"holdfast: lock {key!r} was released")
        self.key = key


class StaleTokenError(HoldfastError):
    """A write carried a fencing token older than the resource's watermark."""

    def __init__(self, token: int, watermark: int) -> None:
        super().__init__(f"holdfast: stale fencing token {token}, the resource has seen {watermark}")
        self.token = token
        self.watermark = watermark


class ClientClosedError(HoldfastError):
    """The client was closed."""

    def __init__(self) -> None:
        super().__init__("holdfast: client closed")


class ClockOffsetError(HoldfastError):
    """A remote HLC stamp was too far ahead of the local clock."""


class InvalidArgumentError(HoldfastError, ValueError):
    """The server (or the SDK, before sending) refused a request: bad key,
    TTL out of range, stamp too far ahead. The message names the field."""

    code = "invalid_argument"


class UnavailableError(HoldfastError):
    """The server or its backend could not be reached or is restarting."""

    code = "unavailable"


class DeadlineExceededError(HoldfastError, TimeoutError):
    """A call's deadline ran out."""

    code = "deadline_exceeded"


class CanceledError(HoldfastError):
    """The call was canceled."""

    code = "canceled"


class UnauthenticatedError(HoldfastError):
    """The request carried no valid credentials."""

    code = "unauthenticated"


class PermissionDeniedError(HoldfastError):
    """The caller is authenticated but not allowed."""

    code = "permission_denied"


class ResourceExhaustedError(HoldfastError):
    """A server limit was hit (too many waiters, keys, requests)."""

    code = "resource_exhausted"


class ServerError(HoldfastError):
    """Any other failure reported by the server or the transport."""


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
    """Maps what a Connect call raised to the SDK's exception classes."""
    if isinstance(err, HoldfastError):
        return err
    if isinstance(err, ConnectError):
        cls = _BY_CODE.get(err.code, ServerError)
        exc = cls(f"holdfast: {what}: {err.message or err.code.value}", code=err.code.value)
    else:
        # Transport failures the runtime did not wrap: treat as unavailable.
        exc = UnavailableError(f"holdfast: {what}: {err}", code="unavailable")
    exc.__cause__ = err
    return exc


def is_retryable(err: BaseException) -> bool:
    """Whether retrying may help: the server or the network may recover."""
    return isinstance(err, UnavailableError)
