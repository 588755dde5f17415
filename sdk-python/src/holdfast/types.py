"""Plain types the SDK returns."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ._timestamp import Timestamp
from .lock.v1 import lock_pb2


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

    @staticmethod
    def from_proto(p: lock_pb2.LockState) -> LockState:
        """Converts the wire form."""
        expires = p.expires_at.ToDatetime(tzinfo=_dt.timezone.utc) if p.HasField("expires_at") else None
        return LockState(
            key=p.key,
            fencing_token=p.fencing_token,
            holder=p.holder,
            expires_at=expires,
            stamp=Timestamp.from_proto(p.stamp if p.HasField("stamp") else None),
            waiters=p.waiters,
            lock_delay=float(p.lock_delay.ToNanoseconds()) / 1e9 if p.HasField("lock_delay") else 0.0,
        )


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


EventType = Literal["synced", "acquired", "released", "expired"]


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
