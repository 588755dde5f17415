"""Plain types the SDK returns."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ._timestamp import Timestamp
from .lock.v1 import lock_pb2

Kind = Literal["mutex", "semaphore", "rwlock", "election"]
"""What a key is: one holder (``mutex``: a lock), holders sharing a limit of
permits (a semaphore), many readers or one writer (an rwlock), or one
leader whose lease carries a value (an election)."""

Mode = Literal["exclusive", "shared"]
"""Whether a grant shares its key: ``shared`` is an rwlock's reader; a lock,
a semaphore grant and a writer are ``exclusive``."""

_KINDS: dict[int, Kind] = {
    lock_pb2.KIND_SEMAPHORE: "semaphore",
    lock_pb2.KIND_RWLOCK: "rwlock",
    lock_pb2.KIND_ELECTION: "election",
}


def kind_from_proto(k: int) -> Kind:
    """The SDK's name of a wire kind (unset and KIND_MUTEX are a mutex)."""
    return _KINDS.get(k, "mutex")


def mode_from_proto(m: int) -> Mode:
    """The SDK's name of a wire mode (anything but shared is exclusive)."""
    return "shared" if m == lock_pb2.MODE_SHARED else "exclusive"


def _seconds(d: Any) -> float:
    return float(d.ToNanoseconds()) / 1e9


def _time(p: Any, field: str) -> _dt.datetime | None:
    return getattr(p, field).ToDatetime(tzinfo=_dt.timezone.utc) if p.HasField(field) else None


@dataclass(frozen=True)
class Grant:
    """One lease held on a key, as others see it (never its owner token)."""

    fencing_token: int
    holder: str
    """Free-text label the holder gave at acquire."""
    expires_at: _dt.datetime | None
    """The server's view of the expiry; informational only."""
    stamp: Timestamp
    """HLC stamp of the grant."""
    permits: int
    """Its share of the key's limit (a semaphore grant's permits; 1 for a
    reader, the whole limit for a writer)."""
    mode: Mode
    lock_delay: float = 0.0
    """Seconds of lock-delay that follow this lease if it expires (locks only)."""
    value: str = ""
    """An election leader's value (``election`` keys; "" otherwise)."""

    @staticmethod
    def from_proto(g: lock_pb2.Grant) -> Grant:
        """Converts the wire form."""
        return Grant(
            fencing_token=g.fencing_token,
            holder=g.holder,
            expires_at=_time(g, "expires_at"),
            stamp=Timestamp.from_proto(g.stamp if g.HasField("stamp") else None),
            permits=max(g.permits, 1),
            mode=mode_from_proto(g.mode),
            lock_delay=_seconds(g.lock_delay) if g.HasField("lock_delay") else 0.0,
            value=g.value,
        )


@dataclass(frozen=True)
class LockState:
    """A held lock as anyone may see it (no owner token)."""

    key: str
    fencing_token: int
    holder: str
    """Free-text label the holder gave at acquire."""
    expires_at: _dt.datetime | None
    """The server's view of the expiry; informational only."""
    stamp: Timestamp
    """HLC stamp of the holder's acquisition."""
    waiters: int
    """Callers queued for the key on the answering server."""
    lock_delay: float = 0.0
    """Seconds of lock-delay that follow this lease if it expires (0: none)."""
    kind: Kind = "mutex"
    """What the key is: ``mutex`` (a lock), ``semaphore`` or ``rwlock`` (fixed by its first grant)."""
    limit: int = 1
    """The key's capacity: 1 for a lock, a semaphore's limit, an rwlock's reader capacity."""
    permits_in_use: int = 1
    """The permits its holders hold, at most limit (1 for a held lock; an
    rwlock writer holds all of them)."""
    holders: tuple[Grant, ...] = ()
    """Every lease held on the key, in fencing-token order: one for a lock
    (the fields above), each permit holder, reader or writer otherwise. For a
    semaphore or rwlock the single-holder fields above (fencing_token,
    holder, expires_at, stamp) are those of the lease that ends first."""

    @staticmethod
    def from_proto(p: lock_pb2.LockState) -> LockState:
        """Converts the wire form (a server from before kinds says nothing: a lock)."""
        kind = kind_from_proto(p.kind)
        state = LockState(
            key=p.key,
            fencing_token=p.fencing_token,
            holder=p.holder,
            expires_at=_time(p, "expires_at"),
            stamp=Timestamp.from_proto(p.stamp if p.HasField("stamp") else None),
            waiters=p.waiters,
            lock_delay=_seconds(p.lock_delay) if p.HasField("lock_delay") else 0.0,
            kind=kind,
            limit=p.limit if kind != "mutex" else 1,
            permits_in_use=p.permits_in_use if kind != "mutex" else 1,
            holders=tuple(Grant.from_proto(g) for g in p.holders),
        )
        if kind == "mutex" and not state.holders:
            one = Grant(
                state.fencing_token, state.holder, state.expires_at, state.stamp, 1, "exclusive", state.lock_delay
            )
            state = dataclasses.replace(state, holders=(one,))
        return state


@dataclass(frozen=True)
class KeyDelay:
    """A key nobody holds that refuses new holders for a while: the
    lock-delay after the expiry of a lease taken with ``lock_delay=``."""

    key: str
    until: _dt.datetime | None
    """The server's view of when the key takes holders again; informational only."""
    remaining: float
    """Seconds left when the server answered."""

    @staticmethod
    def from_proto(p: lock_pb2.KeyDelay) -> KeyDelay:
        """Converts the wire form."""
        return KeyDelay(
            key=p.key,
            until=p.until.ToDatetime(tzinfo=_dt.timezone.utc) if p.HasField("until") else None,
            remaining=float(p.remaining.ToNanoseconds()) / 1e9,
        )


class Inspection(NamedTuple):
    """What ``inspect_delay`` answers: the holder, or (nobody holding) the
    key's lock-delay; both None when the key is free."""

    state: LockState | None
    delay: KeyDelay | None


@dataclass(frozen=True)
class BackendInfo:
    """What the server's backend promises. Durations are in seconds."""

    name: str
    version: str
    shared: bool
    """True when several servers see the same locks."""
    durable: bool
    """True when locks survive a restart of the backend."""
    ttl_granularity: float
    min_ttl: float
    max_ttl: float
    fair: bool
    max_keys: int = 1
    """The most keys one multi-key lock may take (1: one key per lock)."""
    request_ids: bool = False
    """True when the backend recognises repeats of a request (the SDK sends
    a request id on every Acquire, Extend and Release, the same on its
    retries)."""
    max_lock_delay: float = 0.0
    """The longest ``lock_delay`` accepted, in seconds (0: none)."""
    kinds: tuple[Kind, ...] = ("mutex",)
    """The kinds of key the backend keeps (always "mutex"); another is
    answered ``unimplemented``."""
    max_limit: int = 0
    """The largest limit of a semaphore (0: no semaphores)."""
    rwlock_readers: int = 0
    """The reader capacity of every rwlock (0: no rwlocks)."""


@dataclass(frozen=True)
class ServerInfo:
    """The server's version and its backend's promises."""

    version: str
    backend: BackendInfo
    max_clock_offset: float
    """Seconds a client stamp may be ahead of the server's clock."""
    max_wait: float
    """The longest wait (seconds) one Acquire may ask this server for (0: not said)."""
    stamp: Timestamp


EventType = Literal["synced", "acquired", "released", "expired", "proclaimed"]
"""``proclaimed``: an election's leader replaced its value (its term and
expiry unchanged)."""


@dataclass(frozen=True)
class LockEvent:
    """One event of a watch stream."""

    type: EventType
    state: LockState | None
    """The lock the event is about; None for "synced"."""
    stamp: Timestamp


class RunResult(NamedTuple):
    """What ``run_if_free`` and ``run_scheduled`` answer: ``ran`` is False
    (and ``value`` None) when the key was held and the function was not
    called; otherwise ``value`` is what it returned."""

    ran: bool
    value: Any = None


@dataclass(frozen=True)
class Leader:
    """An election's leadership as anyone may see it (never its owner token)."""

    key: str
    term: int
    """The leadership's fencing token: strictly increasing per key over every leadership."""
    holder: str
    """The label the leader campaigned with."""
    value: str
    """The value the leader campaigned with, or its last proclaimed one."""
    expires_at: _dt.datetime | None
    """The server's view of the expiry unless renewed; informational only."""
    stamp: Timestamp
    """HLC stamp of the leadership's acquisition."""

    @staticmethod
    def from_proto(p: lock_pb2.Leader) -> Leader:
        """Converts the wire form."""
        return Leader(
            key=p.key,
            term=p.term,
            holder=p.holder,
            value=p.value,
            expires_at=_time(p, "expires_at"),
            stamp=Timestamp.from_proto(p.stamp if p.HasField("stamp") else None),
        )

    @staticmethod
    def from_state(st: LockState) -> Leader:
        """The leader of a held election key: its one holder."""
        value = st.holders[0].value if st.holders else ""
        return Leader(st.key, st.fencing_token, st.holder, value, st.expires_at, st.stamp)


@dataclass(frozen=True)
class Observation:
    """One message of ``observe()``: the leader at that moment, or None when nobody leads."""

    leader: Leader | None
    stamp: Timestamp
    """The server's HLC reading when it sent the message."""
