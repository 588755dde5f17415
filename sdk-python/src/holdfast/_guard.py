"""The guard of a held lease and its watchdog (docs/promises.md, promise 5)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any, Literal

from google.protobuf import duration_pb2

from . import _durations
from ._options import ExpiryMargin
from ._primitives import Share
from ._renewer import LeaseSlot, Renewer
from ._rpc import Rpc, new_request_id
from ._timestamp import Timestamp
from .errors import (
    ClockOffsetError,
    HoldfastError,
    InvalidArgumentError,
    LeaseLostError,
    LeaseLostReason,
    LockReleasedError,
    is_retryable,
)
from .events import LeaseEvent, LeaseEventListener, LeaseEventType, emit, logger
from .hlc import Clock
from .lock.v1 import lock_pb2

LostCallback = Callable[[LeaseLostError], None]


def to_duration(seconds: float) -> duration_pb2.Duration:
    """The wire form of a duration in seconds."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def from_duration(d: duration_pb2.Duration) -> float:
    """Seconds of a wire duration."""
    return float(d.ToNanoseconds()) / 1e9


def lease_target(lease: lock_pb2.Lease) -> dict[str, Any]:
    """What an Extend or Release of lease names: its key, or every key of a
    multi-key lease."""
    if lease.keys:
        return {"keys": [k.key for k in lease.keys]}
    return {"key": lease.key}


class Session:
    """What a client shares with its guards: the calls, the clock, the
    expiry margin, the event listener and the set of guards still held (which
    ``close`` releases)."""

    def __init__(
        self, rpc: Rpc, clock: Clock, expiry_margin: ExpiryMargin, on_lease_event: LeaseEventListener | None
    ) -> None:
        self.rpc = rpc
        self.clock = clock
        self.expiry_margin = expiry_margin
        self.on_lease_event = on_lease_event
        self.guards: set[AsyncGuard] = set()
        self.renewer = Renewer(rpc, self.stamp, self.merge)
        """The client's watchdog: renews every guard."""

    def merge(self, p: lock_pb2.HlcTimestamp | None) -> None:
        """Merges a server stamp into the clock. One further ahead than the
        max offset is not merged: adopting it would make this client's next
        stamps look too far ahead to every other server; the answer that
        carried it stands."""
        ts = Timestamp.from_proto(p)
        if ts.is_zero():
            return
        with contextlib.suppress(ClockOffsetError):
            self.clock.update(ts)

    def stamp(self) -> lock_pb2.HlcTimestamp | None:
        """A client stamp for a request: the clock, ticked."""
        return self.clock.now().to_proto()


class AsyncGuard:
    """A held lease: a lock, or one grant of a semaphore or rwlock (``kind``,
    ``limit``, ``permits`` and ``mode`` say which; a grant is a lease like a
    lock's, with its own owner token).

    The client's watchdog renews the lease every TTL/3 after the last
    successful renewal was sent, together with the client's other guards due
    about then (one ExtendBatch for all of them: see _renewer.py), each with
    its own outcome. The guard is poisoned when a renewal answers
    extended=false (reason ``rejected``), or when no renewal has succeeded by
    the local expiry: measured on this process's monotonic clock from the
    moment the last successful Acquire or Extend was sent, minus the expiry
    margin (reason ``expired``). Poisoned, its ``lost`` event is set, its
    callbacks run, a ``lost`` lease event is emitted, and ``fencing_token``,
    ``extend()`` and ``unlock()`` raise the LeaseLostError. Nothing is raised
    at the caller asynchronously.
    """

    def __init__(self, session: Session, lease: lock_pb2.Lease, holder: str, valid_from: float, watchdog: bool) -> None:
        self._session = session
        # A multi-key lease: each key with its own fencing token.
        self._fences: dict[str, int] | None = {k.key: k.fencing_token for k in lease.keys} if lease.keys else None
        self.key: str = lease.keys[0].key if lease.keys else lease.key
        """The locked key (a multi-key lease's first key)."""
        self.keys: tuple[str, ...] = tuple(k.key for k in lease.keys) if lease.keys else (lease.key,)
        """Every locked key, in the order given to ``lock()``."""
        self.holder: str = holder
        """The label others see while this guard holds the key."""
        share = Share.of(lease)
        self.kind = share.kind
        """What the key is: ``mutex`` (a lock), ``semaphore`` or ``rwlock``."""
        self.limit: int = share.limit
        """The key's capacity: 1 for a lock, a semaphore's limit, an rwlock's reader capacity."""
        self.permits: int = share.permits
        """This lease's share of the limit: 1 for a lock and a reader, a
        semaphore grant's permits, the whole limit for a writer."""
        self.mode = share.mode
        """``shared`` for an rwlock's reader, ``exclusive`` for everything else."""
        self._owner_token = lease.owner_token
        self._target = lease_target(lease)
        self._fencing_token: int = lease.keys[0].fencing_token if lease.keys else lease.fencing_token
        self._stamp = Timestamp.from_proto(lease.stamp if lease.HasField("stamp") else None)
        self._value: str = lease.value
        self._ttl = from_duration(lease.ttl)
        self._valid_from = valid_from
        self._state: Literal["held", "lost", "released"] = "held"
        self._lost_error: LeaseLostError | None = None
        self._callbacks: list[LostCallback] = []
        self._done_hooks: list[Callable[[], None]] = []
        self._renewals = 0
        self._last_err: HoldfastError | None = None
        self._unlock_lock = asyncio.Lock()  # serialises unlock() and close
        # One lease call at a time: a watchdog renewal or an extend()
        # (_renewer.py), so that their answers apply in the order sent.
        self._slot = LeaseSlot()
        self._tidied = False  # the best-effort release after an "expired" loss was sent
        # A release attempt failed in transit (in this unlock or an earlier
        # one) and may have reached the server: a later released=false then
        # does not prove a loss.
        self._release_in_doubt = False
        self.lost = asyncio.Event()
        """Set when the lease is lost (not when it is released by unlock)."""
        self.done = asyncio.Event()
        """Set when the guard stops holding: lost or released."""
        loop = asyncio.get_running_loop()
        self._expiry: asyncio.TimerHandle | None = None
        self._arm_expiry(loop)
        session.guards.add(self)
        if watchdog:
            session.renewer.add(self)

    # ---- public surface ----

    @property
    def fencing_token(self) -> int:
        """The fencing token of this lease, larger than every earlier holder's.

        Raises LeaseLostError once the lease is lost and LockReleasedError
        once it was unlocked. A multi-key lease has a token per key: use
        ``fencing_token_for(key)`` (this raises InvalidArgumentError)."""
        if self._fences is not None:
            raise InvalidArgumentError(
                f"holdfast: fencing token: the lease holds {len(self.keys)} keys, each with its own fencing token: "
                "use fencing_token_for(key)"
            )
        self._raise_if_not_held()
        return self._fencing_token

    def fencing_token_for(self, key: str) -> int:
        """The fencing token of key, one of the guard's keys. Raises as
        ``fencing_token`` once the guard no longer holds, and
        InvalidArgumentError for a key that is not one of the lease's."""
        self._raise_if_not_held()
        fences = self._fences if self._fences is not None else {self.key: self._fencing_token}
        token = fences.get(key)
        if token is None:
            raise InvalidArgumentError(
                f"holdfast: fencing token: {key!r} is not a key of this lease ({list(self.keys)!r})"
            )
        return token

    @property
    def stamp(self) -> Timestamp:
        """HLC stamp of the acquisition."""
        return self._stamp

    @property
    def held(self) -> bool:
        """Whether the guard still holds its lease (by the local expiry too)."""
        self._check_expiry()
        return self._state == "held"

    @property
    def lost_error(self) -> LeaseLostError | None:
        """The loss, once the lease is lost; None while held or after unlock."""
        return self._lost_error

    @property
    def ttl(self) -> float:
        """The lease's TTL in seconds (as the last Acquire or Extend granted)."""
        return self._ttl

    @property
    def renewals(self) -> int:
        """Number of successful renewals (watchdog and extend())."""
        return self._renewals

    def remaining(self) -> float:
        """Seconds left to the local expiry (the lease's end on this
        process's monotonic clock, less the expiry margin); 0 once lost or
        released."""
        if self._state != "held":
            return 0.0
        return max(0.0, self._expires_at() - time.monotonic())

    def add_lost_callback(self, cb: LostCallback) -> None:
        """Calls cb(LeaseLostError) when the lease is lost (at once if it
        already was). Runs on the event loop; what it raises is logged."""
        if self._lost_error is not None:
            self._call(cb, self._lost_error)
        elif self._state == "held":
            self._callbacks.append(cb)

    def _add_done_hook(self, hook: Callable[[], None]) -> None:
        """Calls hook() when the guard stops holding (at once if it has)."""
        if self._state != "held":
            hook()
        else:
            self._done_hooks.append(hook)

    async def extend(self, ttl: _durations.Duration | None = None) -> None:
        """Renews the lease for ttl (default: its current TTL) from now,
        retrying ``unavailable`` until the local expiry. Raises LeaseLostError
        once the lease is lost (poisoning the guard, reason ``rejected``, when
        the server answers extended=false) and LockReleasedError after
        unlock(). A transport error leaves the guard holding until its local
        expiry."""
        self._raise_if_not_held()
        asked = None if ttl is None else _durations.ttl(ttl)
        self._session.expiry_margin.check(self._ttl if asked is None else asked)
        # After the watchdog's renewal in flight (its answer applied) and any
        # earlier extend: an extend sent beside a renewal could be applied
        # before it and then overwritten by its older answer (TTL, expiry,
        # schedule). The watchdog does not renew while this one waits.
        async with self._slot.hold():
            if self._unlock_lock.locked():
                # An unlock (or the client's close) let go of the renewal
                # this extend waited for: its outcome decides, as for an
                # extend after it.
                async with self._unlock_lock:
                    pass
            self._raise_if_not_held()
            seconds = self._ttl if asked is None else asked
            rid = new_request_id()  # the same on every attempt of this extend

            async def once() -> bool:
                return await self._extend_once(seconds, time.monotonic(), rid=rid)

            try:
                ok = await self._session.rpc.call(f"extend {self._what()}", once, deadline=self._expires_at())
            except HoldfastError:
                self._raise_if_not_held()
                raise
            if ok:
                # Still holding the slot: the watchdog's next renewal is
                # TTL/3 after this extend, with its TTL.
                self._session.renewer.reschedule(self)
                return
        self._raise_if_not_held()
        # Not reached: _extend_once answers False only after the guard ended.
        raise LeaseLostError(self.key, "rejected", self._fencing_token, self._multi_keys())

    @property
    def value(self) -> str:
        """An election leadership's value: the campaign's, or the last
        proclaimed; "" for any other kind."""
        return self._value

    async def _proclaim(self, value: str) -> None:
        """Replaces an election leadership's value if it still leads
        (AsyncLeadership.proclaim). proclaimed=false poisons the guard
        (reason ``rejected``) and raises the LeaseLostError, as
        extended=false does; ``unavailable`` is retried within the retry
        budget and the local expiry (replacing a value twice is harmless).

        It takes the guard's lease-call slot, as extend does and as the Go
        SDK's Proclaim does: two proclaims are sent one after the other, so
        the value kept is the one the server kept (answers of calls in
        flight together could come back in either order)."""
        self._raise_if_not_held()
        if self.kind != "election":
            raise InvalidArgumentError(
                f"holdfast: value: only an election's leadership takes a value (election()); this is a {self.kind}"
            )
        async with self._slot.hold():
            if self._unlock_lock.locked():
                # As in extend: after an unlock under way, its outcome decides.
                async with self._unlock_lock:
                    pass
            await self._proclaim_holding(value)

    async def _proclaim_holding(self, value: str) -> None:
        """_proclaim holding the guard's lease-call slot."""
        self._raise_if_not_held()
        rpc = self._session.rpc
        req = lock_pb2.ProclaimRequest(key=self.key, owner_token=self._owner_token, value=value)

        async def once() -> lock_pb2.ProclaimResponse:
            stamp = self._session.stamp()
            if stamp is not None:
                req.client_stamp.CopyFrom(stamp)
            return await rpc.stub.proclaim(req)

        deadline = min(self._expires_at(), time.monotonic() + rpc.retry_budget)
        try:
            res = await rpc.call(f"proclaim {self._what()}", once, deadline=deadline)
        except HoldfastError:
            self._raise_if_not_held()
            raise
        self._session.merge(res.server_stamp)
        self._session.merge(res.lease.stamp if res.HasField("lease") and res.lease.HasField("stamp") else None)
        if not res.proclaimed:
            self._poison("rejected")
        # Proclaimed after the local expiry still finds the guard lost: the
        # work may have stopped, and the loss stands.
        self._raise_if_not_held()
        self._value = value

    async def unlock(self) -> None:
        """Stops the watchdog and releases the lease.

        Returns only when the server confirmed the release. When the lease
        was already lost, or the server answers released=false, it raises
        the LeaseLostError (reason ``rejected``, ``expired``,
        ``client_closed`` or ``release_unconfirmed``): never a quiet
        success. ``unavailable`` and timeouts are retried with the backoff
        for the retry budget (then UnavailableError: the guard holds, without
        renewals, until its local expiry, and unlock may be called again), or
        until the local expiry if that comes first (the server frees the key
        by itself then, and unlock raises the loss, reason ``expired``).
        unlock() after a successful unlock() is a no-op; after one that
        failed for another reason it may be called again."""
        async with self._unlock_lock:
            self._stop_watchdog()
            self._check_expiry()
            if self._state == "released":
                return
            if self._lost_error is not None:
                await self._release_after_loss()
                raise self._lost_error
            await self._release(time.monotonic() + self._session.rpc.retry_budget)

    async def __aenter__(self) -> AsyncGuard:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        await self._exit(exc_type is not None)

    # ---- internals ----

    async def _exit(self, failed: bool) -> None:
        """The end of an ``async with`` block: unlock. A loss raises its
        LeaseLostError, unless the block itself raised (its exception is the
        story; the release is still attempted)."""
        if not failed:
            await self.unlock()
            return
        with contextlib.suppress(HoldfastError):
            await self.unlock()

    async def _close_for_client(self, budget: float) -> None:
        """AsyncClient.close: release if still held; a guard not released
        ends lost with reason ``client_closed``."""
        async with self._unlock_lock:
            self._stop_watchdog()
            self._check_expiry()
            if self._state != "held":
                return
            # A failure is said by the loss below; the lease expires on the server.
            with contextlib.suppress(HoldfastError):
                await self._release(min(self._expires_at(), time.monotonic() + budget))
            self._poison("client_closed")

    def _stop_watchdog(self) -> None:
        """Stops renewing the lease; a renewal of it in flight is ignored
        when it answers, so the release that follows goes at once."""
        self._session.renewer.remove(self)

    def _expires_at(self) -> float:
        return self._valid_from + self._ttl - self._session.expiry_margin.of(self._ttl)

    async def _release(self, deadline: float) -> None:
        """Sends Release until the server answers, the deadline passes, or
        the local expiry passes (a release after it is moot: the key frees
        itself). Returns once released; raises the LeaseLostError, the
        exhausted-budget UnavailableError when the deadline came first, or a
        non-retryable error (the guard then still holds until expiry)."""
        rpc = self._session.rpc
        start = time.monotonic()
        attempt = 0
        # One request id for every attempt: a server that keeps request ids
        # answers a repeat of a release it did with released=true.
        rid = new_request_id()
        what = f"release {self._what()}"
        while True:
            self._raise_if_not_held()
            left = min(deadline, self._expires_at()) - time.monotonic()
            req = lock_pb2.ReleaseRequest(
                **self._target, owner_token=self._owner_token, client_stamp=self._session.stamp(), request_id=rid
            )
            try:
                res = await rpc.attempt(what, functools.partial(rpc.stub.release, req), min(left, rpc.request_timeout))
            except HoldfastError as err:
                if not is_retryable(err):
                    raise
                self._release_in_doubt = True
                self._last_err = err
                left = min(deadline, self._expires_at()) - time.monotonic()
                pause = rpc.backoff.delay(attempt)
                attempt += 1
                if pause >= left:
                    if left > 0:
                        await asyncio.sleep(left)
                    self._raise_if_not_held()  # past the local expiry: "expired"
                    # The caller's deadline (the retry budget) ran out first.
                    raise rpc.exhausted(what, err, time.monotonic() - start) from err
                await asyncio.sleep(pause)
                continue
            self._session.merge(res.server_stamp)
            if res.released:
                self._finish("released", None)
                # Released, but too late: the guard was already lost on the
                # safe clock (the work may have stopped); that loss stands.
                if self._lost_error is not None:
                    raise self._lost_error
                return
            self._poison("release_unconfirmed" if self._release_in_doubt else "rejected")
            self._raise_if_not_held()
            return

    async def _release_after_loss(self) -> None:
        """After a loss the server did not confirm (``expired``), the lease
        may still be held on the server: one best-effort release frees the
        key before its TTL. Compare-on-release makes it harmless if a
        successor holds it."""
        if self._tidied or self._lost_error is None or self._lost_error.reason != "expired":
            return
        self._tidied = True
        rpc = self._session.rpc
        req = lock_pb2.ReleaseRequest(
            **self._target,
            owner_token=self._owner_token,
            client_stamp=self._session.stamp(),
            request_id=new_request_id(),
        )
        try:
            res = await rpc.attempt(
                f"release {self._what()}", lambda: rpc.stub.release(req), min(self._ttl, rpc.request_timeout)
            )
            self._session.merge(res.server_stamp)
        except HoldfastError:
            pass  # best effort: the lease expires by itself

    async def _extend_once(self, ttl: float, sent_at: float, timeout: float | None = None, *, rid: str) -> bool:
        """One Extend sent at sent_at (request id rid: the same on every
        attempt of one renewal); True when it renewed the lease. An answer of
        extended=false, or one that arrives after the local expiry, poisons
        the guard (and answers False)."""
        rpc = self._session.rpc
        req = lock_pb2.ExtendRequest(
            **self._target,
            owner_token=self._owner_token,
            ttl=to_duration(ttl),
            client_stamp=self._session.stamp(),
            request_id=rid,
        )
        res = await rpc.attempt(
            f"extend {self._what()}",
            lambda: rpc.stub.extend(req),
            rpc.request_timeout if timeout is None else timeout,
        )
        self._session.merge(res.server_stamp)
        self._session.merge(res.lease.stamp if res.HasField("lease") and res.lease.HasField("stamp") else None)
        return self._renewal_answered(res.extended, res.lease if res.HasField("lease") else None, sent_at, ttl)

    # ---- what the client's watchdog (_renewer.py) asks of the guard ----

    def _renewal_request(self) -> tuple[str, float, float] | None:
        """(owner token, ttl, seconds left to the local expiry), or None once the guard no longer holds."""
        self._check_expiry()
        if self._state != "held":
            return None
        return self._owner_token, self._ttl, self._expires_at() - time.monotonic()

    def _renewal_target(self) -> dict[str, Any]:
        """What an Extend of the lease names: its key, or every key of a multi-key lease."""
        return self._target

    def _renewal_due(self) -> float:
        """When the next renewal is due: a third of the TTL after the last successful one was sent."""
        return self._valid_from + self._ttl / 3

    def _renewal_answered(self, extended: bool, lease: lock_pb2.Lease | None, sent_at: float, ttl: float) -> bool:
        """Applies a renewal's answer (sent at sent_at for ttl): True when it
        renewed the lease; False when the guard ended (poisoned on
        extended=false, or by an answer after the local expiry)."""
        if self._state != "held":
            return False
        if not extended:
            self._poison("rejected")
            return False
        if time.monotonic() >= self._expires_at():
            # The answer came after the local expiry: the guard was already
            # lost on the safe clock and the work may have stopped.
            self._poison("expired")
            return False
        # The renewal counts from when it was sent, never from when it
        # answered: the server may have started the new TTL any time after.
        self._valid_from = max(self._valid_from, sent_at)
        self._ttl = from_duration(lease.ttl) if lease is not None and lease.HasField("ttl") else ttl
        self._last_err = None
        self._renewals += 1
        self._arm_expiry(asyncio.get_running_loop())
        self._emit("renewed", latency=time.monotonic() - sent_at)
        return True

    def _renewal_failed(self, err: HoldfastError) -> float:
        """A renewal got no answer for this lease. Any error short of the
        server's extended=false must not drop a lease that is still valid:
        the watchdog retries until the local expiry (the expiry timer poisons
        the guard then, "expired", with this error as the cause). Returns the
        seconds left to the local expiry."""
        if self._state != "held":
            return 0.0
        self._last_err = err
        left = max(0.0, self._expires_at() - time.monotonic())
        self._emit("renewal_failed", error=err, remaining=left)
        return left

    def _arm_expiry(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        # loop.time() is time.monotonic() on every standard event loop.
        delay = self._expires_at() - time.monotonic()
        self._expiry = loop.call_later(max(0.0, delay), self._on_expiry, loop)

    def _on_expiry(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._state != "held":
            return
        if time.monotonic() >= self._expires_at():
            self._poison("expired")
        else:  # a renewal landed while the timer was queued
            self._arm_expiry(loop)

    def _poison(self, reason: LeaseLostReason) -> None:
        if self._state != "held":
            return
        err = LeaseLostError(self.key, reason, self._fencing_token, self._multi_keys())
        if reason == "expired" and self._last_err is not None:
            err.__cause__ = self._last_err  # the renewal trouble that let it run out
        self._lost_error = err
        self._finish("lost", err)

    def _finish(self, state: Literal["lost", "released"], err: LeaseLostError | None) -> None:
        if self._state != "held":
            return  # the first end wins
        self._state = state
        if self._expiry is not None:
            self._expiry.cancel()
        self._session.renewer.remove(self)
        self._session.guards.discard(self)
        self.done.set()
        hooks, self._done_hooks = self._done_hooks, []
        for hook in hooks:
            hook()
        if err is None:
            self._emit("released")
            return
        self.lost.set()
        self._emit("lost", error=err, reason=err.reason)
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            self._call(cb, err)

    def _emit(self, kind: LeaseEventType, **fields: Any) -> None:
        emit(
            self._session.on_lease_event,
            LeaseEvent(
                type=kind,
                key=self.key,
                fencing_token=self._fencing_token,
                ttl=self._ttl,
                renewals=self._renewals,
                keys=self._multi_keys(),
                **fields,
            ),
        )

    def _multi_keys(self) -> tuple[str, ...] | None:
        """The keys of a multi-key lease; None for one key."""
        return self.keys if self._fences is not None else None

    def _what(self) -> str:
        """The lease's key (or keys), for messages."""
        return repr(list(self.keys)) if self._fences is not None else repr(self.key)

    @staticmethod
    def _call(cb: LostCallback, err: LeaseLostError) -> None:
        try:
            cb(err)
        except Exception:  # noqa: BLE001 - a user's callback must not break the watchdog; logged
            logger.exception("holdfast: a lost callback of %r raised", err.key)

    def _check_expiry(self) -> None:
        # The expiry timer may not have run yet (a busy event loop): the
        # safe clock decides, not the timer.
        if self._state == "held" and time.monotonic() >= self._expires_at():
            self._poison("expired")

    def _raise_if_not_held(self) -> None:
        self._check_expiry()
        if self._state == "held":
            return
        if self._lost_error is not None:
            raise self._lost_error
        raise LockReleasedError(self.key)
