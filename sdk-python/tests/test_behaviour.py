"""The rows of docs/sdk-behaviour.md, in Python, against a real server:
defaults, try versus wait, cancellation, retries of an unreachable or hung
server, lease events and logs, skip-if-held, scheduled jobs, the expiry
margin and the blocking client's parity with the async one."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import holdfast
from holdfast import (
    AsyncClient,
    AsyncGuard,
    ExpiryMargin,
    LeaseEvent,
    LeaseLostError,
    NotAcquiredError,
    RunResult,
    UnavailableError,
)
from holdfast.lock.v1 import lock_pb2

from .conftest import SERVER_PID, eventually, key, paused_server, raw_client


class CountCalls:
    """A connectrpc interceptor that records the name of every unary call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def intercept_unary(self, call_next: Callable[[Any, Any], Awaitable[Any]], request: Any, ctx: Any) -> Any:
        self.calls.append(ctx.method().name)
        return await call_next(request, ctx)


def free_port() -> int:
    """A loopback port nobody listens on (the OS just handed it out)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def waiters(client: AsyncClient, k: str) -> int:
    st = await client.inspect(k)
    return 0 if st is None else st.waiters


# ---- defaults: wait, try ----


async def test_acquire_without_wait_queues_until_acquired(client: AsyncClient, other: AsyncClient) -> None:
    k = key("no-wait")
    g = await client.acquire(k, ttl=5)
    waiting = asyncio.ensure_future(other.acquire(k, ttl=5))
    await eventually("the waiter to queue on the server", lambda: _is(waiters(client, k), 1))
    assert not waiting.done()
    await g.unlock()
    g2 = await asyncio.wait_for(waiting, 5)
    assert g2.held and g2.fencing_token > g._fencing_token
    await g2.unlock()


async def _is(v: Awaitable[int], want: int) -> bool:
    return await v == want


async def test_cancelling_a_waiting_acquire_takes_it_off_the_queue(client: AsyncClient, other: AsyncClient) -> None:
    k = key("cancel")
    g = await client.acquire(k, ttl=5)
    waiting = asyncio.ensure_future(other.acquire(k, ttl=5))
    await eventually("the waiter to queue", lambda: _is(waiters(client, k), 1))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await eventually("the waiter to leave the server's queue", lambda: _is(waiters(client, k), 0))
    # A timeout is a cancellation too, and answers TimeoutError.
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(other.acquire(k, ttl=5), 0.3)
    await eventually("the timed-out waiter to leave", lambda: _is(waiters(client, k), 0))
    await g.unlock()


async def test_wait_zero_and_try_are_exactly_one_attempt(addr: str, client: AsyncClient) -> None:
    k = key("one-attempt")
    g = await client.acquire(k, ttl=5)
    counter = CountCalls()
    async with AsyncClient(addr, interceptors=[counter]) as c:
        with pytest.raises(NotAcquiredError) as ei:
            await c.acquire(k, ttl=5, wait=0)
        assert ei.value.current is not None and ei.value.current.fencing_token == g.fencing_token
        assert counter.calls == ["Acquire"]
        got = await c.try_acquire(k, ttl=5)
        assert got is None, "held: try_acquire answers None, never a LockState"
        assert counter.calls == ["Acquire", "Acquire"]
        await g.unlock()
        mine = await c.try_acquire(k, ttl=5)
        assert isinstance(mine, AsyncGuard) and mine.held
        await mine.unlock()


async def test_wait_d_queues_for_d_then_not_acquired_with_the_holder(client: AsyncClient, other: AsyncClient) -> None:
    k = key("wait-d")
    g = await client.acquire(k, ttl=5)
    t0 = time.monotonic()
    with pytest.raises(NotAcquiredError) as ei:
        await other.acquire(k, ttl=5, wait=0.4)
    took = time.monotonic() - t0
    assert 0.4 <= took < 3, took
    assert ei.value.current is not None and ei.value.current.holder == "py-test-a"
    await g.unlock()


async def test_durations_are_checked_before_sending(addr: str) -> None:
    counter = CountCalls()
    async with AsyncClient(addr, interceptors=[counter]) as c:
        with pytest.raises(holdfast.InvalidArgumentError, match=r"ttl: 3ms is below the SDK minimum 100ms"):
            await c.acquire(key("units"), ttl=0.003)
        with pytest.raises(holdfast.InvalidArgumentError, match=r"wait: -1s is negative"):
            await c.acquire(key("units"), wait=-1)
        assert counter.calls == []
        import datetime

        g = await c.acquire(key("units"), ttl=datetime.timedelta(seconds=2), wait=datetime.timedelta(0))
        assert g.ttl == 2
        await g.unlock()


async def test_a_bad_key_is_the_servers_invalid_argument(client: AsyncClient) -> None:
    with pytest.raises(holdfast.InvalidArgumentError, match="key") as ei:
        await client.acquire("", ttl=1, wait=0)
    assert ei.value.code == "invalid_argument"


# ---- an unreachable or hung server ----


async def test_every_call_to_an_unreachable_server_is_unavailable_after_the_retry_budget() -> None:
    counter = CountCalls()
    async with AsyncClient(f"127.0.0.1:{free_port()}", retry_budget=0.6, interceptors=[counter]) as c:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "acquire": lambda: c.acquire("k", ttl=1),
            "acquire wait=0": lambda: c.acquire("k", ttl=1, wait=0),
            "try_acquire": lambda: c.try_acquire("k", ttl=1),
            "inspect": lambda: c.inspect("k"),
            "list": lambda: _drain(c.list("")),
            "server_info": lambda: c.server_info(),
        }
        for name, call in calls.items():
            counter.calls.clear()
            t0 = time.monotonic()
            with pytest.raises(UnavailableError) as ei:
                await call()
            took = time.monotonic() - t0
            assert ei.value.code == "unavailable", name
            # The budget, give or take one backoff step and a loaded machine.
            assert 0.3 <= took < 3, f"{name}: gave up after {took:.2f}s for a 0.6s budget"
            # Equal jitter from 50 ms: attempts at ~0, 25-50, 75-150, 175-350,
            # 375-750 ms: several, never a hammering loop.
            assert 3 <= len(counter.calls) <= 8, f"{name}: {len(counter.calls)} attempts"


async def _drain(it: Any) -> None:
    async for _ in it:
        pass


async def test_unreachable_with_the_default_budget_gives_up_after_5s() -> None:
    async with AsyncClient(f"127.0.0.1:{free_port()}") as c:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match="server unavailable"):
            await c.acquire("k", ttl=1)
        took = time.monotonic() - t0
        assert 4 <= took < 8, took


@pytest.mark.skipif(SERVER_PID is None, reason="HOLDFAST_SERVER_PID unset (run through scripts/with-server.sh)")
async def test_a_hung_server_is_unavailable_after_the_retry_budget(addr: str) -> None:
    assert SERVER_PID is not None
    async with AsyncClient(addr, retry_budget=1) as c:
        await c.server_info()  # connected
        with paused_server():
            t0 = time.monotonic()
            with pytest.raises(UnavailableError, match="no answer within"):
                await c.inspect(key("hung"))
            took = time.monotonic() - t0
        assert 0.8 <= took < 4, took


# ---- lease events and logs ----


async def test_lease_events_reach_the_listener_and_the_log(addr: str, caplog: pytest.LogCaptureFixture) -> None:
    events: list[LeaseEvent] = []
    caplog.set_level(logging.DEBUG, logger="holdfast")
    async with AsyncClient(addr, on_lease_event=events.append) as c:
        g = await c.acquire(key("events"), ttl=0.3)
        await eventually("two renewals", lambda: g.renewals >= 2)
        renewed = [e for e in events if e.type == "renewed"]
        assert len(renewed) >= 2 and renewed[0].renewals == 1
        assert renewed[0].key == g.key and renewed[0].fencing_token == g.fencing_token
        assert renewed[0].latency is not None and renewed[0].ttl == pytest.approx(0.3)
        await g.unlock()
        assert events[-1].type == "released"
        h = await c.acquire(key("events-lost"), ttl=0.3)
        async with raw_client(addr) as raw:
            await raw.release(lock_pb2.ReleaseRequest(key=h.key, owner_token=h._owner_token))
        await asyncio.wait_for(h.lost.wait(), 3)
        lost = [e for e in events if e.type == "lost"]
        assert len(lost) == 1 and lost[0].reason == "rejected" and lost[0].error is h.lost_error
    logged = [r for r in caplog.records if r.name == "holdfast"]
    assert any(r.levelno == logging.DEBUG and "renewed" in r.getMessage() for r in logged)
    assert any(r.levelno == logging.DEBUG and "released" in r.getMessage() for r in logged)
    assert any(r.levelno == logging.WARNING and "lost (rejected)" in r.getMessage() for r in logged)


@pytest.mark.skipif(SERVER_PID is None, reason="HOLDFAST_SERVER_PID unset (run through scripts/with-server.sh)")
async def test_a_failed_renewal_is_a_warning_with_its_error(addr: str, caplog: pytest.LogCaptureFixture) -> None:
    assert SERVER_PID is not None
    events: list[LeaseEvent] = []
    async with AsyncClient(addr, on_lease_event=events.append) as c:
        g = await c.acquire(key("renewal-failed"), ttl=1.5)
        await eventually("a first renewal", lambda: g.renewals >= 1)
        with paused_server():
            await eventually("a failed renewal", lambda: any(e.type == "renewal_failed" for e in events), 5)
        failed = next(e for e in events if e.type == "renewal_failed")
        assert failed.error is not None and failed.error.code == "unavailable"
        assert failed.remaining is not None and 0 < failed.remaining < 1.5
        await g.unlock() if g.held else None
    assert any(r.levelno == logging.WARNING and "failed, retrying" in r.getMessage() for r in caplog.records)


async def test_a_listener_that_raises_is_logged_and_never_stops_the_watchdog(
    addr: str, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(_: LeaseEvent) -> None:
        raise RuntimeError("listener bug")

    async with AsyncClient(addr, on_lease_event=boom) as c:
        g = await c.acquire(key("listener-raises"), ttl=0.3)
        await eventually("renewals despite the listener", lambda: g.renewals >= 3)
        assert g.held
        await g.unlock()
    assert any("listener raised" in r.getMessage() and r.exc_info for r in caplog.records)


# ---- skip if held ----


async def test_run_if_free(client: AsyncClient, other: AsyncClient, addr: str) -> None:
    k = key("run-if-free")
    seen: list[int] = []

    async def job(guard: AsyncGuard) -> str:
        seen.append(guard.fencing_token)
        st = await other.inspect(k)
        assert st is not None and st.fencing_token == guard.fencing_token, "runs under the lock"
        return "done"

    assert await client.run_if_free(k, job, ttl=5) == RunResult(True, "done")
    assert len(seen) == 1 and await other.inspect(k) is None, "released after"
    g = await other.acquire(k, ttl=5)
    assert await client.run_if_free(k, job, ttl=5) == RunResult(False, None)
    assert len(seen) == 1, "not called when held"
    await g.unlock()

    async def loses_it(guard: AsyncGuard) -> None:
        async with raw_client(addr) as raw:
            await raw.release(lock_pb2.ReleaseRequest(key=guard.key, owner_token=guard._owner_token))

    with pytest.raises(LeaseLostError) as ei:
        await client.run_if_free(k, loses_it, ttl=5)
    assert ei.value.reason == "rejected"


def test_run_if_free_blocking(addr: str) -> None:
    k = key("run-if-free-sync")
    with holdfast.Client(addr, holder="py-sync-a") as c, holdfast.Client(addr, holder="py-sync-b") as d:
        result = c.run_if_free(k, lambda guard: guard.fencing_token, ttl=5)
        assert result.ran and isinstance(result.value, int)
        held = d.acquire(k, ttl=5)
        called: list[bool] = []
        assert c.run_if_free(k, lambda guard: called.append(True), ttl=5) == RunResult(False, None)
        assert not called
        held.unlock()


# ---- scheduled jobs (docs/recipes/scheduled-jobs.md) ----


async def test_run_scheduled(client: AsyncClient, other: AsyncClient) -> None:
    k = key("scheduled")
    tokens: list[int] = []

    async def report(fencing_token: int) -> int:
        tokens.append(fencing_token)
        return fencing_token

    res = await client.run_scheduled(k, max_runtime=2, run=report)
    assert res.ran and res.value == tokens[0]
    assert await other.inspect(k) is None
    g = await other.acquire(k, ttl=5)
    assert await client.run_scheduled(k, max_runtime=2, run=report) == RunResult(False, None)
    assert len(tokens) == 1
    await g.unlock()
    with pytest.raises(holdfast.InvalidArgumentError, match="must be longer than max_runtime"):
        await client.run_scheduled(k, max_runtime=2, ttl=2, run=report)

    async def overruns(_: int) -> None:
        await asyncio.Event().wait()

    t0 = time.monotonic()
    with pytest.raises(holdfast.DeadlineExceededError, match="max_runtime 300ms"):
        await client.run_scheduled(k, max_runtime=0.3, run=overruns)
    assert time.monotonic() - t0 < 3
    assert await other.inspect(k) is None, "released after the overrun"


async def test_run_scheduled_cancels_the_run_when_the_lease_is_lost(client: AsyncClient, addr: str) -> None:
    k = key("scheduled-lost")
    cancelled = asyncio.Event()

    async def job(fencing_token: int) -> None:
        st = await client.inspect(k)
        assert st is not None
        async with raw_client(addr) as raw:
            # Someone releases it with the owner token (read from the
            # client's guards: the SDK never exposes it).
            (g,) = client._session.guards
            await raw.release(lock_pb2.ReleaseRequest(key=k, owner_token=g._owner_token))
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(LeaseLostError) as ei:
        await client.run_scheduled(k, max_runtime=1, run=job)
    assert ei.value.reason == "rejected" and cancelled.is_set()


def test_run_scheduled_blocking_sets_stop_at_max_runtime(addr: str) -> None:
    k = key("scheduled-sync")
    with holdfast.Client(addr) as c:
        assert c.run_scheduled(k, max_runtime=2, run=lambda token, stop: token).ran

        def overruns(_: int, stop: threading.Event) -> None:
            assert stop.wait(5), "stop is set at max_runtime"

        with pytest.raises(holdfast.DeadlineExceededError):
            c.run_scheduled(k, max_runtime=0.3, run=overruns)
        assert c.inspect(k) is None


# ---- the expiry margin ----


async def test_the_guard_is_poisoned_the_margin_before_the_server_frees_the_key(addr: str, other: AsyncClient) -> None:
    margin = ExpiryMargin(drift_factor=0.2, fixed=0.1)  # 0.5 s of a 2 s lease
    async with AsyncClient(addr, expiry_margin=margin) as c:
        k = key("margin")
        sent = time.monotonic()
        g = await c.acquire(k, ttl=2, watchdog=False)
        assert g.remaining() <= 2 - 0.5
        await asyncio.wait_for(g.lost.wait(), 5)
        lost_at = time.monotonic()
        assert g.lost_error is not None and g.lost_error.reason == "expired"
        assert lost_at - sent >= 1.5, "not before TTL - margin"
        st = await other.inspect(k)
        assert st is not None and st.fencing_token == g._fencing_token, (
            "the server still holds it when the guard gives up"
        )


# ---- the blocking client: parity ----


def test_blocking_client_parity(addr: str) -> None:
    k = key("sync-parity")
    events: list[LeaseEvent] = []
    with holdfast.Client(addr, on_lease_event=events.append, retry_budget=2, default_ttl=0.6) as c:
        g = c.acquire(k)
        assert g.ttl == pytest.approx(0.6) and not g.done.is_set()
        assert g.holder == f"{socket.gethostname()}:{os.getpid()}"
        with c.watch(key=k) as stream:
            first = next(stream)
            assert first.type == "synced"
            g.unlock()
            assert g.done.is_set() and not g.lost.is_set()
            ev = next(stream)
            assert ev.type == "released" and ev.state is not None and ev.state.key == k
        assert c.try_acquire(k, ttl=1) is not None
    assert any(e.type == "released" for e in events)


@pytest.fixture
def sync_client(addr: str) -> Iterator[holdfast.Client]:
    with holdfast.Client(addr) as c:
        yield c


def test_blocking_acquire_without_wait_queues(addr: str, sync_client: holdfast.Client) -> None:
    k = key("sync-queue")
    g = sync_client.acquire(k, ttl=5)
    got: list[holdfast.Guard] = []
    with holdfast.Client(addr) as other:
        t = threading.Thread(target=lambda: got.append(other.acquire(k, ttl=5)))
        t.start()
        deadline = time.monotonic() + 5
        while (st := sync_client.inspect(k)) is not None and st.waiters == 0:
            assert time.monotonic() < deadline, "the waiter never queued"
            time.sleep(0.01)
        g.unlock()
        t.join(5)
        assert got and got[0].held
        got[0].unlock()


async def test_closing_the_client_ends_a_waiting_acquire_with_client_closed(addr: str, client: AsyncClient) -> None:
    k = key("close-waiting")
    g = await client.acquire(k, ttl=10)
    c = AsyncClient(addr)
    waiting = asyncio.ensure_future(c.acquire(k, ttl=5, wait=20))
    await eventually("the waiter to queue", lambda: _is(waiters(client, k), 1))
    t0 = time.monotonic()
    await c.close()
    with pytest.raises(holdfast.ClientClosedError) as ei:
        await asyncio.wait_for(waiting, 5)
    assert ei.value.code == "client_closed" and time.monotonic() - t0 < 2
    await g.unlock()


@pytest.mark.skipif(SERVER_PID is None, reason="HOLDFAST_SERVER_PID unset (run through scripts/with-server.sh)")
async def test_unlock_of_an_unreachable_server_is_unavailable_after_the_retry_budget(addr: str) -> None:
    assert SERVER_PID is not None
    async with AsyncClient(addr, retry_budget=0.5) as c:
        g = await c.acquire(key("unlock-budget"), ttl=5)
        with paused_server():
            t0 = time.monotonic()
            with pytest.raises(UnavailableError):
                await g.unlock()
            took = time.monotonic() - t0
        assert 0.4 <= took < 3, took
        assert g.held, "still held (without renewals) until its local expiry"
        # The attempts that timed out may have reached the server, which
        # answers them once resumed: unlocking again either releases, or
        # finds it released by one of them (never a quiet "rejected").
        (outcome,) = await asyncio.gather(g.unlock(), return_exceptions=True)
        assert outcome is None or (isinstance(outcome, LeaseLostError) and outcome.reason == "release_unconfirmed"), (
            outcome
        )
        assert not g.held
        assert await c.inspect(g.key) is None
