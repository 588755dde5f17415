"""The client's watchdog renews its guards together (_renewer.py): calls per
renewal period in proportion to the client, not to its leases; each guard
keeps its own outcome. Against a real server (make test-sdk-python)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from holdfast import AsyncClient, AsyncGuard, Backoff, ExpiryMargin, LeaseEvent, LeaseLostError
from holdfast._guard import Session, to_duration
from holdfast._renewer import LeaseSlot, Renewer
from holdfast._rpc import Rpc
from holdfast.errors import HoldfastError, LockReleasedError, UnavailableError
from holdfast.hlc import Clock
from holdfast.lock.v1 import lock_pb2

from .conftest import eventually, key, raw_client


class Calls:
    """Counts unary calls by method; with ``old``, answers ExtendBatch
    unimplemented, as an older server would."""

    def __init__(self, *, old: bool = False) -> None:
        self.calls: list[str] = []
        self.old = old

    async def intercept_unary(self, call_next: Callable[[Any, Any], Awaitable[Any]], request: Any, ctx: Any) -> Any:
        name = ctx.method().name
        self.calls.append(name)
        if self.old and name == "ExtendBatch":
            raise ConnectError(Code.UNIMPLEMENTED, "an older server (test)")
        return await call_next(request, ctx)


async def _lock_many(c: AsyncClient, n: int, ttl: float, name: str) -> list[AsyncGuard]:
    return [await c.acquire(key(f"{name}-{i}"), ttl=ttl) for i in range(n)]


async def test_a_clients_guards_are_renewed_in_a_few_extend_batch_calls(addr: str) -> None:
    calls = Calls()
    ttl = 0.9
    async with AsyncClient(addr, interceptors=[calls]) as c:
        gs = await _lock_many(c, 40, ttl, "many")
        # Count the renewals only: an acquire answered after TTL/3 (a loaded
        # machine) confirms its lease with one Extend of its own.
        calls.calls.clear()
        end = time.monotonic() + ttl + ttl / 6
        while time.monotonic() < end:
            assert all(g.held for g in gs), [str(g.lost_error) for g in gs if not g.held]
            await asyncio.sleep(0.01)
        assert all(g.renewals >= 2 for g in gs), [g.renewals for g in gs]
        assert calls.calls.count("Extend") == 0, "plain Extends to a server that batches"
        batches = calls.calls.count("ExtendBatch")
        assert 0 < batches <= 12, f"{batches} ExtendBatch calls for 40 guards over 3 periods"
        for g in gs:
            await g.unlock()


async def test_only_the_guard_whose_lease_is_gone_is_poisoned(addr: str) -> None:
    ttl = 0.9
    async with AsyncClient(addr) as c:
        gs = await _lock_many(c, 5, ttl, "reject")
        async with raw_client(addr) as raw:
            res = await raw.release(lock_pb2.ReleaseRequest(key=gs[2].key, owner_token=gs[2]._owner_token))
            assert res.released
        await asyncio.wait_for(gs[2].lost.wait(), ttl / 3 + 1)
        lost = gs[2].lost_error
        assert isinstance(lost, LeaseLostError) and lost.reason == "rejected"
        before = [g.renewals for g in gs]
        await eventually(
            "the others renewed again", lambda: all(g.renewals > before[i] for i, g in enumerate(gs) if i != 2)
        )
        for i, g in enumerate(gs):
            if i != 2:
                assert g.held
                await g.unlock()


async def test_a_server_without_extend_batch_gets_an_extend_per_guard(addr: str) -> None:
    calls = Calls(old=True)
    ttl = 0.6
    async with AsyncClient(addr, interceptors=[calls]) as c:
        gs = await _lock_many(c, 5, ttl, "old")
        await eventually("every guard renewed twice", lambda: all(g.renewals >= 2 for g in gs), timeout=3 * ttl + 2)
        assert all(g.held for g in gs)
        assert calls.calls.count("Extend") >= 10
        assert calls.calls.count("ExtendBatch") <= 1, "ExtendBatch is tried once at most, then plain Extends"
        for g in gs:
            await g.unlock()


async def test_a_lost_renewal_is_retried_with_its_request_ids_and_a_set_renews_by_its_own_extend(addr: str) -> None:
    ttl = 0.9
    async with AsyncClient(addr) as c:
        batches: list[dict[str, str]] = []  # per ExtendBatch: key -> request id
        extends: list[tuple[tuple[str, ...], str]] = []
        stub = c._rpc.stub
        real_batch, real_extend = stub.extend_batch, stub.extend
        lost = [False]

        async def extend_batch(req: Any, **kw: Any) -> Any:
            batches.append({it.key: it.request_id for it in req.items})
            res = await real_batch(req, **kw)
            if not lost[0]:
                lost[0] = True  # the server renewed; its answer never arrives
                raise ConnectError(Code.UNAVAILABLE, "connection reset (test: the answer was lost)")
            return res

        async def extend(req: Any, **kw: Any) -> Any:
            extends.append((tuple(req.keys) or (req.key,), req.request_id))
            return await real_extend(req, **kw)

        setattr(stub, "extend_batch", extend_batch)  # noqa: B010 (typed stubs)
        setattr(stub, "extend", extend)  # noqa: B010
        singles = await _lock_many(c, 3, ttl, "lost")
        both = await c.acquire(key("lost-set-a"), key("lost-set-b"), ttl=ttl)
        everyone = [*singles, both]
        await eventually("every guard renewed", lambda: all(g.renewals >= 1 for g in everyone), timeout=2 * ttl + 2)
        assert all(g.held for g in everyone)
        assert len(batches) >= 2, f"{len(batches)} ExtendBatch calls: want the lost one and its retry"
        for g in singles:
            first = batches[0].get(g.key)
            assert first, f"{g.key} in the first ExtendBatch with a request id"
            retries = [b[g.key] for b in batches[1:] if g.key in b] + [i for ks, i in extends if ks == (g.key,)]
            assert retries and retries[0] == first, f"{g.key}: the retry of a renewal carries its request id"
        assert not any(k in b for b in batches for k in both.keys), "a multi-key guard in an ExtendBatch"
        assert any(ks == both.keys and i for ks, i in extends), (
            "the set renewed by an Extend of its keys with a request id"
        )
        for g in everyone:
            await g.unlock()


class _FirstExtend:
    """An Rpc for the renewer alone: answers every Extend extended=True and
    notes when the first one was sent."""

    def __init__(self) -> None:
        self.request_timeout = 10.0
        self.backoff = Backoff()
        self.first_sent: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.stub = self

    async def attempt(self, what: str, call: Callable[[], Awaitable[Any]], timeout: float) -> Any:
        return await call()

    async def extend(self, req: lock_pb2.ExtendRequest) -> lock_pb2.ExtendResponse:
        if not self.first_sent.done():
            self.first_sent.set_result(time.monotonic())
        return lock_pb2.ExtendResponse(extended=True)


class _Held:
    """A guard for the renewer alone, its acquisition sent at acquired."""

    def __init__(self, key: str, ttl: float, acquired: float) -> None:
        self.key = key
        self._ttl = ttl
        self._valid_from = acquired
        self._slot = LeaseSlot()

    @property
    def ttl(self) -> float:
        return self._ttl

    def _renewal_request(self) -> tuple[str, float, float] | None:
        return "owner", self._ttl, self._valid_from + self._ttl - time.monotonic()

    def _renewal_due(self) -> float:
        return self._valid_from + self._ttl / 3

    def _renewal_target(self) -> dict[str, Any]:
        return {"key": self.key}

    def _renewal_answered(self, extended: bool, lease: lock_pb2.Lease | None, sent_at: float, ttl: float) -> bool:
        self._valid_from = sent_at
        return True

    def _renewal_failed(self, err: HoldfastError) -> float:
        return 0.0


async def test_the_first_renewal_comes_at_the_clients_phase() -> None:
    """A client's phase brings every first renewal forward by phase·TTL/6:
    clients whose guards were acquired at the same moment renew them apart,
    each at sent + TTL/3 - phase·TTL/6."""
    ttl, slack = 6.0, 0.5  # slack: a timer's and a loaded machine's delay
    cases = [(0.0, 2.0), (0.9, 1.1)]  # (phase, first renewal due after the acquisition)
    acquired = time.monotonic()  # both guards' acquisitions were sent now
    runs = []
    for phase, _ in cases:
        rpc = _FirstExtend()
        renewer = Renewer(cast(Any, rpc), lambda: None, lambda _: None, phase=phase)
        renewer.add(_Held(f"phase-{phase}", ttl, acquired))
        runs.append((renewer, rpc))
    try:
        for (phase, due), (_, rpc) in zip(cases, runs, strict=True):
            after = await asyncio.wait_for(rpc.first_sent, ttl) - acquired
            # Never before it is due; later only by the timer's delay.
            assert due <= after <= due + slack, (
                f"phase {phase}: first renewal sent {after:.3f}s after the acquisition, want {due}s (+ {slack}s)"
            )
    finally:
        for renewer, _ in runs:
            await renewer.close()


class _Unavailable:
    """A stub whose every Extend fails in transit (unavailable), noting when
    it was sent; a release is answered released=True."""

    def __init__(self) -> None:
        self.extends: list[float] = []

    async def extend(self, req: lock_pb2.ExtendRequest) -> lock_pb2.ExtendResponse:
        self.extends.append(time.monotonic())
        raise ConnectError(Code.UNAVAILABLE, "backend restarting (test)")

    async def release(self, req: lock_pb2.ReleaseRequest) -> lock_pb2.ReleaseResponse:
        return lock_pb2.ReleaseResponse(released=True)


async def test_a_renewal_retry_due_at_the_local_expiry_is_not_sent() -> None:
    """A renewal that fails transiently is retried after the backoff, cut to
    the time left: with a backoff longer than the lease, the retry is due
    exactly at the local expiry. Then the lease has ended on our clock, so
    the watchdog sends nothing at or after it and the guard is lost, once,
    even when its expiry timer has not run yet (a busy event loop):
    cancelled here, so that only the watchdog can notice the expiry. The Go
    and TS SDKs have the same test."""
    stub = _Unavailable()
    rpc = Rpc(cast(Any, stub), retry_budget=5.0, request_timeout=10.0, backoff=Backoff(initial=3600, cap=3600))
    events: list[LeaseEvent] = []
    session = Session(rpc, Clock(), ExpiryMargin(), events.append)
    session.renewer = Renewer(rpc, session.stamp, session.merge, phase=0.0)  # the first renewal at TTL/3
    ttl = 0.6
    lease = lock_pb2.Lease(key="k", owner_token="owner", fencing_token=1, ttl=to_duration(ttl))
    g = AsyncGuard(session, lease, "holder", time.monotonic(), watchdog=True)
    try:
        assert g._expiry is not None
        g._expiry.cancel()  # as if the timer had not had its turn yet
        expiry = g._expires_at()
        try:
            await asyncio.wait_for(g.lost.wait(), ttl + 0.5)
        except asyncio.TimeoutError:
            pytest.fail(f"guard not lost; {len(stub.extends)} renewals sent (want 1: the retry is due at the expiry)")
        assert time.monotonic() >= expiry, "lost before the local expiry"
        err = g.lost_error
        assert err is not None and err.reason == "expired", err
        assert isinstance(err.__cause__, UnavailableError), err.__cause__
        with pytest.raises(LeaseLostError):
            await g.unlock()
    finally:
        await session.renewer.close()  # ends every renewal in flight: what was sent by now is all there is
    assert len(stub.extends) == 1, f"{len(stub.extends)} renewals sent, want 1: the failed one, no retry at the expiry"
    assert [e.reason for e in events if e.type == "lost"] == ["expired"]


class _Server:
    """A stub that keeps one lease as a server would: each Extend is applied
    when it arrives (the server's end of the lease: arrival + its TTL) and
    answered when the test lets it (``hold`` blocks the next Extend's answer
    until ``answer`` is set); a release is answered released=True."""

    def __init__(self) -> None:
        self.extends: list[tuple[float, float]] = []  # (arrival, ttl) per Extend
        self.server_end = 0.0
        self.hold = False
        self.held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.answer = asyncio.Event()

    async def extend(self, req: lock_pb2.ExtendRequest) -> lock_pb2.ExtendResponse:
        now, ttl = time.monotonic(), req.ttl.ToNanoseconds() / 1e9
        self.extends.append((now, ttl))
        self.server_end = now + ttl
        if self.hold:
            self.hold = False
            self.held.set_result(None)
            await self.answer.wait()
        return lock_pb2.ExtendResponse(extended=True, lease=lock_pb2.Lease(key=req.key, ttl=req.ttl))

    async def release(self, req: lock_pb2.ReleaseRequest) -> lock_pb2.ReleaseResponse:
        return lock_pb2.ReleaseResponse(released=True)


def _guard_on(server: _Server, ttl: float, acquired: float) -> tuple[AsyncGuard, Session]:
    """A guard of server's lease, acquired at acquired, whose watchdog
    renews its first time at TTL/3 (phase 0)."""
    rpc = Rpc(cast(Any, server), retry_budget=5.0, request_timeout=10.0, backoff=Backoff())
    session = Session(rpc, Clock(), ExpiryMargin(), None)
    session.renewer = Renewer(rpc, session.stamp, session.merge, phase=0.0)
    lease = lock_pb2.Lease(key="k", owner_token="owner", fencing_token=1, ttl=to_duration(ttl))
    return AsyncGuard(session, lease, "holder", acquired, watchdog=True), session


async def _not_done_within(task: asyncio.Task[Any], span: float) -> bool:
    """Whether task is still running after span (observing an absence
    needs a span of time; a task that can finish does so well within it)."""
    done, _ = await asyncio.wait({task}, timeout=span)
    return not done


async def test_an_extend_beside_a_renewal_goes_after_it_and_its_ttl_and_schedule_stand() -> None:
    """An explicit extend called while the watchdog's renewal of the guard
    is in flight waits for that renewal's answer to be applied, so the
    older renewal never overwrites the newer extend. Otherwise, an extend
    shortening the lease (3s to 1.2s) answered before the renewal would be
    overwritten by it: the guard would believe in the 3s lease the server
    had cut to 1.2s (promise 5), and renew on the old TTL's schedule. The Go
    SDK has the same test (TestExtendDuringARenewalAnswerIsAppliedAfterIt)."""
    server = _Server()
    server.hold = True  # the renewal's answer waits for the test
    ttl, short = 3.0, 1.2
    g, session = _guard_on(server, ttl, time.monotonic() - ttl / 3)  # the first renewal is due now
    try:
        await asyncio.wait_for(server.held, 2.0)
        extend = asyncio.get_running_loop().create_task(g.extend(short))
        waited = await _not_done_within(extend, 0.2)
        server.answer.set()
        await asyncio.wait_for(extend, 2.0)
        assert g.renewals == 2, "the renewal and the extend both applied"
        assert g.ttl == short, f"ttl {g.ttl} after extend({short}) beside a renewal: the renewal's older answer won"
        assert g._expires_at() <= server.server_end, (
            f"the guard holds {g._expires_at() - server.server_end:.3f}s past the server's end of the lease"
        )
        assert g.remaining() <= short
        assert waited, "the extend did not wait for the renewal in flight"
        (renewed, _), (extended, extend_ttl) = server.extends
        assert extend_ttl == short and extended > renewed
        # The next renewal: the extend's TTL, a third of it after the extend.
        await eventually("the watchdog renewed after the extend", lambda: len(server.extends) >= 3, timeout=2 * ttl)
        next_sent, next_ttl = server.extends[2]
        assert next_ttl == short, f"the watchdog renewed with {next_ttl}s after extend({short})"
        after = next_sent - extended
        assert short / 3 - 0.02 <= after <= short / 3 + 0.3, f"renewed {after:.3f}s after the extend, want {short / 3}s"
        await g.unlock()
    finally:
        server.answer.set()
        await session.renewer.close()


async def test_unlock_lets_go_of_a_renewal_and_the_extend_waiting_for_it() -> None:
    """unlock does not wait for a renewal in flight; an extend waiting for
    that renewal wakes too and fails as an extend after unlock does
    (LockReleasedError), never sent. The renewal's answer, when it comes, is
    ignored."""
    server = _Server()
    server.hold = True
    ttl = 3.0
    g, session = _guard_on(server, ttl, time.monotonic() - ttl / 3)
    try:
        await asyncio.wait_for(server.held, 2.0)
        extend = asyncio.get_running_loop().create_task(g.extend(1.2))
        assert await _not_done_within(extend, 0.1), "the extend did not wait for the renewal in flight"
        await asyncio.wait_for(g.unlock(), 2.0)
        with pytest.raises(LockReleasedError):
            await asyncio.wait_for(extend, 2.0)
        assert len(server.extends) == 1, "an extend sent after its guard was unlocked"
        server.answer.set()
        await eventually("the renewal answered", lambda: not session.renewer._in_flight)
        assert not g.held and g.renewals == 0, "the let-go renewal's answer was applied"
    finally:
        server.answer.set()
        await session.renewer.close()


async def test_extends_of_a_guard_go_one_at_a_time_and_the_watchdog_waits_for_them() -> None:
    """Two extends of one guard go one after the other, and the watchdog
    does not renew a guard while an extend of it is in flight or waiting:
    its renewal, due meanwhile, comes a third of the last extend's TTL after
    that extend, with its TTL."""
    server = _Server()
    server.hold = True  # the first extend's answer waits for the test
    ttl = 3.0
    g, session = _guard_on(server, ttl, time.monotonic() - ttl / 3 + 0.1)  # the first renewal is due in 0.1s
    try:
        loop = asyncio.get_running_loop()
        first = loop.create_task(g.extend(2.4))
        await asyncio.wait_for(server.held, 2.0)
        second = loop.create_task(g.extend(1.5))
        assert await _not_done_within(second, 0.3), "the second extend did not wait for the first"
        assert len(server.extends) == 1, f"{len(server.extends)} Extends while the first extend was in flight"
        server.answer.set()
        await asyncio.wait_for(asyncio.gather(first, second), 2.0)
        assert [t for _, t in server.extends] == [2.4, 1.5]
        assert g.ttl == 1.5 and g.renewals == 2
        await eventually("the watchdog renewed after the extends", lambda: len(server.extends) >= 3, timeout=2 * ttl)
        (_, _), (extended, _), (renewed, renew_ttl) = server.extends[:3]
        assert renew_ttl == 1.5
        assert 0.5 - 0.02 <= renewed - extended <= 0.5 + 0.3, f"renewed {renewed - extended:.3f}s after the extend"
        await g.unlock()
    finally:
        server.answer.set()
        await session.renewer.close()


class _ProclaimServer:
    """A stub that answers Proclaims, the first one only when the test lets
    it (``answer``), recording each one's arrival and value."""

    def __init__(self) -> None:
        self.proclaims: list[tuple[float, str]] = []
        self.held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.answer = asyncio.Event()

    async def proclaim(self, req: lock_pb2.ProclaimRequest) -> lock_pb2.ProclaimResponse:
        self.proclaims.append((time.monotonic(), req.value))
        if len(self.proclaims) == 1:
            self.held.set_result(None)
            await self.answer.wait()
        return lock_pb2.ProclaimResponse(proclaimed=True)

    async def release(self, req: lock_pb2.ReleaseRequest) -> lock_pb2.ReleaseResponse:
        return lock_pb2.ReleaseResponse(released=True)


async def test_a_proclaim_beside_another_goes_after_it_and_the_value_the_server_kept_stands() -> None:
    """A leadership's proclaim takes the guard's lease-call slot, as extend
    does and as the Go SDK's Proclaim does: two proclaims in flight together
    could be answered in either order, and the guard would then show the
    value the server replaced."""
    server = _ProclaimServer()
    rpc = Rpc(cast(Any, server), retry_budget=5.0, request_timeout=10.0, backoff=Backoff())
    session = Session(rpc, Clock(), ExpiryMargin(), None)
    session.renewer = Renewer(rpc, session.stamp, session.merge, phase=0.0)
    lease = lock_pb2.Lease(
        key="e", owner_token="owner", fencing_token=1, ttl=to_duration(6.0), kind=lock_pb2.KIND_ELECTION, value="v0"
    )
    g = AsyncGuard(session, lease, "holder", time.monotonic(), watchdog=False)
    loop = asyncio.get_running_loop()
    try:
        first = loop.create_task(g._proclaim("a"))
        await asyncio.wait_for(server.held, 2.0)
        second = loop.create_task(g._proclaim("b"))
        assert await _not_done_within(second, 0.2)
        assert len(server.proclaims) == 1, "the second proclaim was sent beside the first in flight"
        answered = time.monotonic()
        server.answer.set()
        await asyncio.wait_for(asyncio.gather(first, second), 2.0)
        assert [v for _, v in server.proclaims] == ["a", "b"]
        assert server.proclaims[1][0] >= answered, "the second proclaim was sent before the first was answered"
        assert g.value == "b", f"the guard shows {g.value!r}, a value the server replaced"
        await g.unlock()
    finally:
        server.answer.set()
        await session.renewer.close()
