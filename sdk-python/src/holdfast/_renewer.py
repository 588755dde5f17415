"""The client's watchdog (docs/sdk-behaviour.md, "The guard and the watchdog").

One renewer for every guard of a client, so that renewing costs calls in
proportion to the clients, not to the leases. Each guard is due TTL/3 after
its last successful renewal was sent. Its first renewal comes a little
sooner: each client draws a phase f in [0,1) once, when it is created, and
every guard's first renewal is due at sent + TTL/3 - f·TTL/6 (sent: when its
acquisition was sent), the same shift for all the client's guards. Clients
whose guards were acquired at the same moments (a fleet started together)
so spread their renewals over a sixth of the TTL, and stay spread, instead
of all sending at the same instant and queueing on the server; renewing
earlier is always safe, as a lease counts from the send time. When the
renewer sends for a due guard it takes along every other guard due within the next TTL/6, in one
ExtendBatch (a single guard goes as a plain Extend), so guards renewed
together stay together. Each guard keeps its own outcome and loss semantics
(promise 5): extended=false poisons that guard alone; an item the server
could not decide is a failed renewal of that guard, retried with the backoff
like a failed call. A multi-key guard is renewed by an Extend of its whole
set (ExtendBatch items are single keys), with the renewal's request id, the
same on each retry of that renewal.

Each guard makes one lease call at a time (its LeaseSlot): a renewal and an
explicit extend() never overlap, so their answers are applied in the order
they were sent. A renewal's answer is applied, and the guard scheduled
again, before its slot is given back: an extend waiting for the slot comes
after it, and the older renewal never overwrites the extend's TTL, expiry
or schedule (the guard would believe in a lease the server had shortened).
A guard whose slot is taken (an extend in flight or waiting) is looked at
again BUSY_RETRY later.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf import duration_pb2

from ._rpc import Rpc, new_request_id
from .errors import HoldfastError, ServerError, UnavailableError
from .lock.v1 import lock_pb2

# The most leases one ExtendBatch carries (the server accepts 1000).
MAX_BATCH_ITEMS = 500
# A guard may be renewed up to TTL/RENEW_EARLY before it is due, to go with
# another guard's renewal.
RENEW_EARLY = 6
# A client's phase f brings every first renewal of its guards
# f·TTL/PHASE_SPREAD forward: the clients' first renewals are spread over a
# sixth of the TTL.
PHASE_SPREAD = 6
# When the watchdog looks again at a due guard whose slot an explicit
# extend holds or waits for (as the Go SDK's busyRetry).
BUSY_RETRY = 0.01


class LeaseSlot:
    """A guard's one lease call at a time: its watchdog renewal or an
    explicit extend. The watchdog only takes a free slot (try_take) and
    never one an extend waits for; an extend waits for it (hold), in turn.
    A slot given back passes to the next waiter without being free in
    between."""

    def __init__(self) -> None:
        self._taken = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        """Takes the slot if it is free and no one waits for it."""
        if self._taken or self._waiters:
            return False
        self._taken = True
        return True

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Holds the slot for the block, waiting for it first."""
        await self._take()
        try:
            yield
        finally:
            self.give_back()

    async def _take(self) -> None:
        if self.try_take():
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.give_back()  # handed the slot as the waiter was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(turn)
            raise

    def give_back(self) -> None:
        """Passes the slot to the next waiter, or frees it."""
        while self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._taken = False


class Renewable(Protocol):
    """What the renewer needs of a guard (AsyncGuard implements it)."""

    key: str
    _slot: LeaseSlot
    """The guard's one lease call at a time (a renewal or an explicit extend)."""

    @property
    def ttl(self) -> float: ...

    def _renewal_request(self) -> tuple[str, float, float] | None:
        """(owner token, ttl, seconds left to the local expiry), or None once the guard no longer holds."""
        ...

    def _renewal_due(self) -> float:
        """The time.monotonic() of the next renewal: TTL/3 after the last successful one was sent."""
        ...

    def _renewal_target(self) -> dict[str, Any]:
        """What an Extend of the lease names: ``{"key": k}``, or ``{"keys": [...]}`` for a multi-key lease."""
        ...

    def _renewal_answered(self, extended: bool, lease: lock_pb2.Lease | None, sent_at: float, ttl: float) -> bool:
        """Applies an answer; False when the guard ended."""
        ...

    def _renewal_failed(self, err: HoldfastError) -> float:
        """A renewal got no answer for this guard: the seconds left to its local expiry."""
        ...


@dataclass(eq=False)
class _Entry:
    guard: Renewable
    next: float
    attempt: int = 0
    in_flight: bool = False
    """A renewal of the guard is under way, holding the guard's slot."""
    request_id: str = ""
    """The request id of the renewal under way: drawn at its first attempt, kept on its retries."""


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


class Renewer:
    """The client's one watchdog task and the renewal calls it sends. The
    task runs while some guard is scheduled and ends when none is (the next
    add starts it again); close() ends it and every renewal in flight."""

    def __init__(
        self,
        rpc: Rpc,
        stamp: Callable[[], lock_pb2.HlcTimestamp | None],
        merge: Callable[[lock_pb2.HlcTimestamp | None], None],
        phase: float | None = None,
    ) -> None:
        self._rpc = rpc
        # The client's renewal phase in [0,1): first renewals are due
        # phase·TTL/6 before TTL/3. Drawn at random unless a test fixes it.
        self._phase = random.random() if phase is None else phase
        self._stamp = stamp
        self._merge = merge
        self._entries: dict[Renewable, _Entry] = {}
        self._task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        # The server does not serve ExtendBatch (an older server answered
        # unimplemented): plain Extends.
        self._single = False

    def add(self, g: Renewable) -> None:
        """Schedules g's first renewal: TTL/3 after its acquisition was sent, brought forward by phase·TTL/6."""
        self._entries[g] = _Entry(g, g._renewal_due() - self._phase * g.ttl / PHASE_SPREAD)
        self._poke()

    def remove(self, g: Renewable) -> None:
        """Stops renewing g. A renewal of it in flight is let go of: its slot
        is given back now (an unlock's release does not wait for it, and an
        extend waiting for it wakes), and its answer is ignored."""
        e = self._entries.pop(g, None)
        if e is None:
            return
        self._settle(e)  # let go of: its answer finds e gone and is ignored
        if not self._entries:
            self._poke()  # the task sees the empty schedule and ends

    def reschedule(self, g: Renewable) -> None:
        """After an explicit extend(), which holds g's slot (so no renewal of
        g is in flight): the next renewal is TTL/3 after it."""
        e = self._entries.get(g)
        if e is None:
            return
        e.next, e.attempt = g._renewal_due(), 0
        self._poke()

    async def close(self) -> None:
        """No more renewals: ends the task and the renewals in flight."""
        for e in self._entries.values():
            self._settle(e)
        self._entries.clear()
        tasks = [t for t in (self._task, *self._in_flight) if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _poke(self) -> None:
        if self._task is None or self._task.done():
            if self._entries:
                self._task = asyncio.get_running_loop().create_task(self._loop())
            return
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._entries:
            now = time.monotonic()
            batch = self._take(now)
            for i in range(0, len(batch), MAX_BATCH_ITEMS):
                t = loop.create_task(self._renew(batch[i : i + MAX_BATCH_ITEMS]))
                self._in_flight.add(t)
                t.add_done_callback(self._in_flight.discard)
            if batch:
                continue  # a guard may have come due meanwhile
            nxt = min((e.next for e in self._entries.values() if not e.in_flight), default=None)
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            timer = None if nxt is None else loop.call_later(max(0.0, nxt - now), _wake, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                self._waiter = None

    def _take(self, now: float) -> list[_Entry]:
        """The entries to renew now: the first due one and every entry due
        by the end of its own early window that falls within the first
        one's; marked in flight."""
        idle = [e for e in self._entries.values() if not e.in_flight]
        first = min(idle, key=lambda e: e.next, default=None)
        if first is None or first.next > now:
            return []
        horizon = now + first.guard.ttl / RENEW_EARLY
        batch = []
        for e in idle:
            if e.next > horizon or e.next > now + e.guard.ttl / RENEW_EARLY:
                continue
            if not e.guard._slot.try_take():
                # An explicit extend holds the slot or waits for it: it
                # reschedules the guard when answered; look again shortly
                # in case it fails.
                e.next = max(e.next, now + BUSY_RETRY)
                continue
            e.in_flight = True
            batch.append(e)
        return batch

    async def _renew(self, batch: list[_Entry]) -> None:
        """One renewal call for batch, and each entry's outcome."""
        live: list[tuple[_Entry, str, float]] = []
        bound = self._rpc.request_timeout
        for e in batch:
            ask = e.guard._renewal_request()
            if ask is None:
                self._done(e)  # ended meanwhile
                continue
            owner, ttl, left = ask
            if e.attempt == 0:
                e.request_id = new_request_id()  # a new renewal; its retries keep the id
            live.append((e, owner, ttl))
            # Bounded by the lease with the least time left and by a third
            # of its TTL, so that a hung connection leaves every guard time
            # for another attempt.
            bound = min(bound, max(0.001, min(left, ttl / 3)))
        if not live:
            return
        sent_at = time.monotonic()
        # ExtendBatch items are single keys: a multi-key lease renews by an
        # Extend of its set, beside the batch.
        sets = [x for x in live if "keys" in x[0].guard._renewal_target()]
        singles = [x for x in live if "keys" not in x[0].guard._renewal_target()]
        if self._single or len(singles) <= 1:
            await asyncio.gather(*(self._renew_one(e, owner, ttl, sent_at, bound) for e, owner, ttl in live))
            return
        await asyncio.gather(
            *(self._renew_one(e, owner, ttl, sent_at, bound) for e, owner, ttl in sets),
            self._renew_batch(singles, sent_at, bound),
        )

    async def _renew_batch(self, live: list[tuple[_Entry, str, float]], sent_at: float, bound: float) -> None:
        """One ExtendBatch for single-key guards, and each entry's outcome."""
        req = lock_pb2.ExtendBatchRequest(
            items=[
                lock_pb2.ExtendBatchItem(key=e.guard.key, owner_token=o, ttl=_duration(t), request_id=e.request_id)
                for e, o, t in live
            ],
            client_stamp=self._stamp(),
        )
        try:
            res = await self._rpc.attempt("renew (ExtendBatch)", lambda: self._rpc.stub.extend_batch(req), bound)
        except HoldfastError as err:
            if err.code == "unimplemented":
                # An older server: plain Extends from now on.
                self._single = True
                again = time.monotonic()
                await asyncio.gather(*(self._renew_one(e, owner, ttl, again, bound) for e, owner, ttl in live))
                return
            for e, _, _ in live:
                self._failed(e, err)
            return
        self._merge(res.server_stamp)
        if len(res.results) != len(live):
            bad = ServerError(
                "holdfast: renew (ExtendBatch): answered a different number of results than leases sent",
                code="internal",
            )
            for e, _, _ in live:
                self._failed(e, bad)
            return
        for (e, _, ttl), r in zip(live, res.results, strict=True):
            if r.HasField("error"):
                msg = f"holdfast: renew {e.guard.key!r}: {r.error.message}"
                item_err: HoldfastError = (
                    UnavailableError(msg) if r.error.code == "unavailable" else ServerError(msg, code="internal")
                )
                self._failed(e, item_err)
                continue
            self._merge(r.lease.stamp if r.HasField("lease") and r.lease.HasField("stamp") else None)
            self._answered(e, r.extended, r.lease if r.HasField("lease") else None, sent_at, ttl)

    async def _renew_one(self, e: _Entry, owner: str, ttl: float, sent_at: float, bound: float) -> None:
        """One Extend of e's lease (its key, or its set of keys), with the renewal's request id."""
        target = e.guard._renewal_target()
        req = lock_pb2.ExtendRequest(
            **target, owner_token=owner, ttl=_duration(ttl), client_stamp=self._stamp(), request_id=e.request_id
        )
        what = f"renew {target['keys']!r}" if "keys" in target else f"renew {e.guard.key!r}"
        try:
            res = await self._rpc.attempt(what, lambda: self._rpc.stub.extend(req), bound)
        except HoldfastError as err:
            self._failed(e, err)
            return
        self._merge(res.server_stamp)
        self._merge(res.lease.stamp if res.HasField("lease") and res.lease.HasField("stamp") else None)
        self._answered(e, res.extended, res.lease if res.HasField("lease") else None, sent_at, ttl)

    def _current(self, e: _Entry) -> bool:
        """Whether e is still scheduled (not removed while its renewal was in flight)."""
        return self._entries.get(e.guard) is e

    def _answered(self, e: _Entry, extended: bool, lease: lock_pb2.Lease | None, sent_at: float, ttl: float) -> None:
        """Applies e's renewal answer and schedules e again, then gives its
        slot back (an extend waiting for it goes after, never before)."""
        if not self._current(e):
            return  # let go of by remove: the answer is ignored
        if not e.guard._renewal_answered(extended, lease, sent_at, ttl):
            self._done(e)
            return
        e.attempt, e.next = 0, e.guard._renewal_due()
        self._settle(e)
        self._poke()

    def _failed(self, e: _Entry, err: HoldfastError) -> None:
        """No answer for e's guard: retried with the backoff, until the
        local expiry poisons the guard (a transient error never ends a lease
        that is still valid)."""
        if not self._current(e):
            return
        left = e.guard._renewal_failed(err)
        if left <= 0:
            self._done(e)
            return
        e.next = time.monotonic() + min(self._rpc.backoff.delay(e.attempt), left)
        e.attempt += 1
        self._settle(e)
        self._poke()

    def _settle(self, e: _Entry) -> None:
        """Takes e out of flight and gives its guard's slot back (once: an
        entry removed in flight was settled by remove)."""
        if e.in_flight:
            e.in_flight = False
            e.guard._slot.give_back()

    def _done(self, e: _Entry) -> None:
        if self._current(e):
            del self._entries[e.guard]
            self._settle(e)
        if not self._entries:
            self._poke()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
