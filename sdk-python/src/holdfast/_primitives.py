"""Semaphores and read-write locks: keys with more than one lease.

Every key has a kind and a limit, fixed by the server at the key's first
grant, and each grant holds some permits of that limit: a lock is limit 1, a
semaphore grant takes 1 to limit permits, an rwlock reader one permit and a
writer all of them. So the three are one rule with different weights, and a
grant is a lease like a lock's (its own owner token, fencing token, TTL,
watchdog and poisoning): they share the acquire loop and the guard. This
module maps what a caller asks for to the Acquire request, and what a lease
or a state says back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError
from .lock.v1 import lock_pb2
from .types import Kind, Mode, kind_from_proto, mode_from_proto


@dataclass(frozen=True)
class Primitive:
    """What one acquisition asks to hold of its key. ``permits`` is None
    when the caller set none (a semaphore's default is 1)."""

    kind: Kind = "mutex"
    limit: Any = None
    permits: Any = None
    mode: Mode = "exclusive"
    value: Any = ""

    def check(self, keys: tuple[str, ...], lock_delay: float) -> None:
        """Refuses, before anything is sent, a semaphore without a usable
        limit or permits, permits on anything else, and several keys or a
        lock-delay for anything but a lock: InvalidArgumentError naming the
        field, the value and the bound."""
        if self.kind == "semaphore":
            if not _whole(self.limit) or self.limit < 1:
                raise InvalidArgumentError(
                    f"holdfast: limit: {self.limit!r}: a semaphore needs a limit of at least 1, a whole number "
                    "(semaphore(key, limit))"
                )
            permits = 1 if self.permits is None else self.permits
            if not _whole(permits):
                raise InvalidArgumentError(f"holdfast: permits: {permits!r} is not a whole number")
            if permits < 1:
                raise InvalidArgumentError(
                    f"holdfast: permits: {permits} is below 1: a grant takes 1 to the semaphore's limit "
                    f"({self.limit}) permits"
                )
            if permits > self.limit:
                raise InvalidArgumentError(f"holdfast: permits: {permits} is above the semaphore's limit {self.limit}")
        elif self.permits is not None:
            raise InvalidArgumentError(
                f"holdfast: permits: only a semaphore takes permits (semaphore(key, limit)); this is a {self.kind}"
            )
        if self.kind == "mutex":
            return
        if self.kind == "election":
            check_value(self.value)
        if len(keys) > 1:
            raise InvalidArgumentError(f"holdfast: keys: a {self.kind} is one key; only a lock takes several")
        if lock_delay > 0:
            raise InvalidArgumentError(f"holdfast: lock_delay: only a lock takes a lock-delay; this is a {self.kind}")

    def request_fields(self) -> dict[str, Any]:
        """The Acquire fields: none for a lock (its request is a lock's as
        before kinds)."""
        if self.kind == "semaphore":
            return {
                "kind": lock_pb2.KIND_SEMAPHORE,
                "limit": self.limit,
                "permits": 1 if self.permits is None else self.permits,
            }
        if self.kind == "rwlock":
            mode = lock_pb2.MODE_SHARED if self.mode == "shared" else lock_pb2.MODE_EXCLUSIVE
            return {"kind": lock_pb2.KIND_RWLOCK, "mode": mode}
        if self.kind == "election":
            return {"kind": lock_pb2.KIND_ELECTION, "value": self.value}
        return {}

    def granted_as_asked(self, lease: lock_pb2.Lease) -> bool:
        """Whether the server granted what was asked: a server that does not
        know kinds drops the fields and grants a lock, which must not pass
        for a semaphore or an rwlock share."""
        return kind_from_proto(lease.kind) == self.kind


LOCK = Primitive()
"""A lock: what ``lock()`` asks for."""


@dataclass(frozen=True)
class Share:
    """What a guard holds of its key, read from the lease the server granted."""

    kind: Kind
    limit: int
    permits: int
    mode: Mode

    @staticmethod
    def of(lease: lock_pb2.Lease) -> Share:
        """The lease's share of the key's limit (a mutex's is 1 of 1, a
        reader's 1 of the reader capacity, a writer's all of it); every grant
        but a reader's is exclusive. A server from before kinds says
        nothing: a mutex."""
        kind = kind_from_proto(lease.kind)
        if kind in ("mutex", "election"):
            return Share(kind, 1, 1, "exclusive")
        return Share(kind, lease.limit, max(lease.permits, 1), mode_from_proto(lease.mode))


MAX_VALUE_BYTES = 4096
"""The longest value an election's leader may carry, in bytes of UTF-8."""


def check_value(value: Any) -> None:
    """Refuses, before anything is sent, a value the server would refuse,
    with the server's words: not a str, longer than 4096 bytes of UTF-8,
    not UTF-8 (a lone surrogate), or holding a NUL (which PostgreSQL's text
    cannot keep)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"holdfast: value: {value!r} is not a str")
    raw = value.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_VALUE_BYTES:
        raise InvalidArgumentError(f"holdfast: value: {len(raw)} bytes exceeds the maximum {MAX_VALUE_BYTES} bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError("holdfast: value: must be valid UTF-8") from None
    if (nul := raw.find(b"\x00")) >= 0:
        raise InvalidArgumentError(f"holdfast: value: must not contain NUL (found at byte {nul})")


def _whole(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool)
