"""Tests against a real `holdfast serve`: promises 2 to 6 of docs/promises.md
from the client's side, plus errors, waiting, watch and the blocking client."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

import holdfast
from holdfast import (
    AsyncClient,
    AsyncGuard,
    Clock,
    InvalidArgumentError,
    LeaseLostError,
    LockReleasedError,
    NotAcquiredError,
    UnavailableError,
    validate_write,
)
from holdfast.lock.v1 import lock_pb2

from .conftest import SERVER_PID, eventually, key, paused_server, raw_client


async def test_acquire_contention_release(client: AsyncClient, other: AsyncClient) -> None:
    k = key("basic")
    g = await client.acquire(k, ttl=5)
    assert g.held
    assert await other.try_acquire(k, ttl=5) is None
    with pytest.raises(NotAcquiredError) as ei:
        await other.acquire(k, ttl=5, wait=0)
    assert ei.value.code == "not_acquired"
    assert ei.value.current is not None and ei.value.current.holder == "py-test-a"
    assert ei.value.current.fencing_token == g.fencing_token
    st = await other.inspect(k)
    assert st is not None and st.fencing_token == g.fencing_token
    await g.unlock()
    assert not g.held and g.done.is_set() and not g.lost.is_set()
    with pytest.raises(LockReleasedError):
        _ = g.fencing_token
    assert await other.inspect(k) is None
    await g.unlock()  # a second unlock after a successful one is a no-op


async def test_promise2_stale_release_is_a_noop(client: AsyncClient, other: AsyncClient) -> None:
    k = key("token-compare")
    stale = await client.acquire(k, ttl=0.2, watchdog=False)
    await asyncio.wait_for(stale.lost.wait(), 2)
    successor: list[AsyncGuard] = []

    async def take() -> bool:
        r = await other.try_acquire(k, ttl=10)
        if isinstance(r, AsyncGuard):
            successor.append(r)
        return bool(successor)

    await eventually("the key to be free after the TTL", take)
    # unlock() of a lost lease raises the loss, never a quiet success
    # (etcd#22082), and its tidy-up release cannot touch the successor.
    with pytest.raises(LeaseLostError) as ei:
        await stale.unlock()
    assert ei.value.reason == "expired" and ei.value is stale.lost_error
    assert ei.value.fencing_token == stale._fencing_token
    with pytest.raises(LeaseLostError):
        await stale.unlock()
    with pytest.raises(LeaseLostError):
        await stale.extend()
    st = await client.inspect(k)
    assert st is not None and st.fencing_token == successor[0].fencing_token
    await successor[0].unlock()


async def test_promise3_ttl(client: AsyncClient, other: AsyncClient) -> None:
    info = await client.server_info()
    k = key("ttl")
    ttl = 0.4
    sent_at = time.monotonic()
    g = await client.acquire(k, ttl=ttl, watchdog=False)
    assert await other.try_acquire(k, ttl=1) is None
    freed: list[float] = []

    async def free() -> bool:
        if await other.inspect(k) is None:
            freed.append(time.monotonic())
            return True
        return False

    await eventually("the lock to expire", free, ttl + info.backend.ttl_granularity + 2)
    took = freed[0] - sent_at
    assert took >= ttl, f"freed after {took}s, before the {ttl}s TTL"
    assert took <= ttl + info.backend.ttl_granularity + 1.0
    assert not g.held and g.lost.is_set()


async def test_promise3_ttl_bounds(client: AsyncClient) -> None:
    info = await client.server_info()
    with pytest.raises(InvalidArgumentError, match="ttl") as ei:
        await client.acquire(key("bounds"), ttl=(info.backend.max_ttl or 1e9) * 2)
    assert ei.value.code == "invalid_argument"
    with pytest.raises(InvalidArgumentError, match="key"):
        await client.acquire("", ttl=1)


async def test_promise4_fencing_increases(client: AsyncClient, other: AsyncClient) -> None:
    k = key("fencing")
    tokens: list[int] = []
    watermark = 0
    for i in range(4):
        g = await (other if i % 2 else client).acquire(k, ttl=5)
        tokens.append(g.fencing_token)
        watermark = validate_write(g.fencing_token, watermark)
        await g.unlock()
    old = await client.acquire(k, ttl=0.15, watchdog=False)
    old_token = old.fencing_token
    tokens.append(old_token)
    nxt: list[AsyncGuard] = []

    async def take() -> bool:
        r = await other.try_acquire(k, ttl=5)
        if isinstance(r, AsyncGuard):
            nxt.append(r)
        return bool(nxt)

    await eventually("takeover after expiry", take)
    tokens.append(nxt[0].fencing_token)
    watermark = validate_write(nxt[0].fencing_token, watermark)
    assert all(a < b for a, b in itertools.pairwise(tokens)), tokens
    with pytest.raises(holdfast.StaleTokenError):
        validate_write(old_token, watermark)
    await nxt[0].unlock()


async def test_promise5_watchdog_keeps_the_lease_for_3_ttls(client: AsyncClient, other: AsyncClient) -> None:
    k = key("watchdog")
    # Short enough to keep the suite fast, long enough that a loaded 2-core
    # machine's scheduling hiccups do not eat a whole renewal window.
    ttl = 0.6
    start = time.monotonic()
    g = await client.acquire(k, ttl=ttl)
    await eventually("3 TTLs to pass", lambda: time.monotonic() - start > 3 * ttl + 0.1)
    assert g.held, g.lost_error
    assert g.renewals >= 3
    st = await other.inspect(k)
    assert st is not None and st.fencing_token == g.fencing_token
    assert await other.try_acquire(k, ttl=1) is None
    await g.unlock()


async def test_promise5_extended_false_poisons(client: AsyncClient, addr: str) -> None:
    k = key("poison-refused")
    g = await client.acquire(k, ttl=0.6)
    seen: list[LeaseLostError] = []
    g.add_lost_callback(seen.append)
    # A rogue party releases the lease with the real owner token (read from
    # the guard's internals: the SDK never exposes it); the next renewal then
    # answers extended=false.
    await _release_behind_its_back(addr, g)
    await asyncio.wait_for(g.lost.wait(), 2)
    assert g.lost_error is not None and g.lost_error.reason == "rejected"
    assert seen and seen[0] is g.lost_error
    with pytest.raises(LeaseLostError):
        _ = g.fencing_token
    with pytest.raises(LeaseLostError):
        await g.extend()
    with pytest.raises(LeaseLostError) as ei:
        await g.unlock()
    assert ei.value is g.lost_error


async def _release_behind_its_back(addr: str, g: AsyncGuard) -> None:
    """A rogue party releases the lease with the real owner token (read from
    the guard's internals: the SDK never exposes it)."""
    async with raw_client(addr) as raw:
        res = await raw.release(lock_pb2.ReleaseRequest(key=g.key, owner_token=g._owner_token))
        assert res.released


async def test_unlock_of_lease_released_behind_its_back_raises_rejected(client: AsyncClient, addr: str) -> None:
    g = await client.acquire(key("unlock-rejected"), ttl=10, watchdog=False)
    await _release_behind_its_back(addr, g)
    assert g.held, "the guard has not been told yet"
    with pytest.raises(LeaseLostError) as ei:
        await g.unlock()
    assert ei.value.reason == "rejected" and ei.value is g.lost_error
    assert g.lost.is_set() and g.done.is_set()
    with pytest.raises(LeaseLostError):
        _ = g.fencing_token
    with pytest.raises(LeaseLostError) as again:
        await g.unlock()
    assert again.value is ei.value, "a later unlock reports the same loss"


async def test_extend_of_lease_released_behind_its_back_raises_rejected(client: AsyncClient, addr: str) -> None:
    g = await client.acquire(key("extend-rejected"), ttl=10, watchdog=False)
    await _release_behind_its_back(addr, g)
    with pytest.raises(LeaseLostError) as ei:
        await g.extend()
    assert ei.value.reason == "rejected"
    assert not g.held
    with pytest.raises(LeaseLostError) as again:
        await g.unlock()
    assert again.value is ei.value


def _lose_first_release(c: AsyncClient, when: str, *, strip_request_ids: bool = False) -> None:
    """Loses the answer to c's first Release: "after" sends it (the server
    releases) and then reports unavailable, as a connection cut after the
    request left; "before" fails it without sending. strip_request_ids sends
    every Release without its request id, as to a server whose backend keeps
    none."""
    real = c._rpc.stub.release
    dropped = False

    async def release(req: lock_pb2.ReleaseRequest) -> lock_pb2.ReleaseResponse:
        nonlocal dropped
        if strip_request_ids:
            req.request_id = ""
        if dropped:
            return await real(req)
        dropped = True
        if when == "after":
            await real(req)
        raise ConnectError(Code.UNAVAILABLE, "connection reset (test)")

    c._rpc.stub.release = release  # type: ignore[method-assign,assignment]


async def test_retried_release_answered_false_is_release_unconfirmed(addr: str, other: AsyncClient) -> None:
    # Without request ids (a backend that keeps none): the retry cannot be
    # recognised as a repeat and answers released=false.
    k = key("release-unconfirmed")
    async with AsyncClient(addr) as c:
        _lose_first_release(c, "after", strip_request_ids=True)
        g = await c.acquire(k, ttl=10)
        with pytest.raises(LeaseLostError) as ei:
            await g.unlock()
        assert ei.value.reason == "release_unconfirmed"
        assert await other.inspect(k) is None, "the first attempt did release it"


async def test_release_failed_before_sending_is_retried(addr: str, other: AsyncClient) -> None:
    k = key("release-retried")
    async with AsyncClient(addr) as c:
        _lose_first_release(c, "before")
        g = await c.acquire(k, ttl=10)
        await g.unlock()
        with pytest.raises(LockReleasedError):
            _ = g.fencing_token
        assert await other.inspect(k) is None
        await g.unlock()  # no-op


async def test_async_with_raises_when_the_lease_was_lost_in_the_block(client: AsyncClient, addr: str) -> None:
    k = key("with-lost")
    with pytest.raises(LeaseLostError) as ei:
        async with client.lock(k, ttl=10, watchdog=False) as g:
            await _release_behind_its_back(addr, g)
    assert ei.value.reason == "rejected"

    # The block's own exception wins over the loss.
    async def block_that_raises() -> None:
        async with client.lock(k, ttl=10, watchdog=False) as g:
            await _release_behind_its_back(addr, g)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await block_that_raises()


@pytest.mark.skipif(SERVER_PID is None, reason="HOLDFAST_SERVER_PID unset (run through scripts/with-server.sh)")
async def test_promise5_no_renewal_by_expiry_poisons(client: AsyncClient, other: AsyncClient) -> None:
    assert SERVER_PID is not None
    k = key("poison-expired")
    ttl = 0.5
    g = await client.acquire(k, ttl=ttl)
    token = g.fencing_token
    with paused_server():
        await asyncio.wait_for(g.lost.wait(), 3 * ttl)
    assert g.lost_error is not None and g.lost_error.reason == "expired"
    with pytest.raises(LeaseLostError):
        _ = g.fencing_token
    nxt: list[AsyncGuard] = []

    async def take() -> bool:
        r = await other.try_acquire(k, ttl=5)
        if isinstance(r, AsyncGuard):
            nxt.append(r)
        return bool(nxt)

    await eventually("takeover after the pause", take)
    assert nxt[0].fencing_token > token
    await nxt[0].unlock()


@pytest.mark.skipif(SERVER_PID is None, reason="HOLDFAST_SERVER_PID unset (run through scripts/with-server.sh)")
async def test_promise5_short_pause_does_not_drop_the_lease(client: AsyncClient, other: AsyncClient) -> None:
    """Transient renewal trouble must not drop a lease that is still valid."""
    assert SERVER_PID is not None
    k = key("pause-short")
    g = await client.acquire(k, ttl=2.0)
    await eventually("a first renewal", lambda: g.renewals >= 1)
    r0 = g.renewals
    with paused_server():
        # The stimulus, not a synchronisation: at least one renewal (every
        # ~0.67 s) meets the paused server.
        await asyncio.sleep(0.8)
    await eventually("renewals to resume", lambda: g.renewals > r0 + 1, 3)
    assert g.held, g.lost_error
    st = await other.inspect(k)
    assert st is not None and st.fencing_token == g.fencing_token
    await g.unlock()


async def test_promise5_explicit_extend(client: AsyncClient) -> None:
    g = await client.acquire(key("extend"), ttl=1, watchdog=False)
    await g.extend(2)
    assert g.ttl == 2
    assert g.remaining() > 1
    await g.unlock()
    with pytest.raises(LockReleasedError):
        await g.extend()


async def test_promise6_hlc(client: AsyncClient, other: AsyncClient, addr: str) -> None:
    k = key("hlc")
    stamps = []
    for i in range(3):
        c = other if i % 2 else client
        sent = c.clock.last()
        g = await c.acquire(k, ttl=5)
        assert g.stamp > sent, f"lease stamp {g.stamp} not after client stamp {sent}"
        assert not c.clock.last() < g.stamp, "the client merged the server's stamps"
        stamps.append(g.stamp)
        await g.unlock()
    assert all(a < b for a, b in itertools.pairwise(stamps)), stamps
    info = await client.server_info()
    ahead = int(info.max_clock_offset / 2 * 1e9)
    async with AsyncClient(addr, clock=Clock(physical=lambda: time.time_ns() + ahead)) as skewed:
        sent = skewed.clock.now()
        g = await skewed.acquire(k, ttl=5)
        assert g.stamp > sent
        assert g.stamp > stamps[-1]
        await g.unlock()


async def test_promise6_stamp_beyond_max_offset_is_refused(client: AsyncClient, addr: str) -> None:
    info = await client.server_info()
    ahead = int((info.max_clock_offset * 4 + 1) * 1e9)
    async with AsyncClient(addr, clock=Clock(physical=lambda: time.time_ns() + ahead)) as skewed:
        with pytest.raises(InvalidArgumentError):
            await skewed.acquire(key("skew"), ttl=1)


async def test_wait_on_the_server(client: AsyncClient, other: AsyncClient) -> None:
    k = key("wait")
    g = await client.acquire(k, ttl=5)
    waiting = asyncio.ensure_future(other.acquire(k, ttl=5, wait=5))

    async def queued() -> bool:
        st = await client.inspect(k)
        return st is not None and st.waiters > 0

    await eventually("the waiter to queue", queued)
    await g.unlock()
    g2 = await waiting
    assert g2.fencing_token > g.stamp.logical * 0  # granted, with a token
    await g2.unlock()
    h = await client.acquire(k, ttl=5)
    t0 = time.monotonic()
    with pytest.raises(NotAcquiredError):
        await other.acquire(k, ttl=5, wait=0.3)
    assert time.monotonic() - t0 < 0.3 + 2
    await h.unlock()


async def test_late_grant_is_confirmed_not_dead_on_arrival(client: AsyncClient, other: AsyncClient) -> None:
    """A lease granted after a server-side wait longer than its TTL."""
    k = key("late-grant")
    a = await client.acquire(k, ttl=10)
    ttl = 0.5
    waiting = asyncio.ensure_future(other.acquire(k, ttl=ttl, wait=5))

    async def queued() -> bool:
        st = await client.inspect(k)
        return st is not None and st.waiters > 0

    await eventually("the waiter to queue", queued)
    # The stimulus: keep the waiter queued for longer than its TTL.
    await asyncio.sleep(ttl + 0.3)
    await a.unlock()
    b = await waiting
    assert b.held, b.lost_error
    start = time.monotonic()
    await eventually("2 TTLs to pass", lambda: time.monotonic() - start > 2 * ttl)
    assert b.held, b.lost_error
    st = await client.inspect(k)
    assert st is not None and st.fencing_token == b.fencing_token
    await b.unlock()


async def test_async_with_releases(client: AsyncClient, other: AsyncClient) -> None:
    k = key("with")
    async with client.lock(k, ttl=5) as g:
        st = await other.inspect(k)
        assert st is not None and st.fencing_token == g.fencing_token
    assert await other.inspect(k) is None
    with pytest.raises(RuntimeError, match="boom"):
        async with client.lock(k, ttl=5):
            raise RuntimeError("boom")
    assert await other.inspect(k) is None
    g = await client.lock(k, ttl=5)  # awaitable form
    await g.unlock()


async def test_close_releases_guards(addr: str, other: AsyncClient) -> None:
    k = key("close")
    c = AsyncClient(addr)
    g = await c.acquire(k, ttl=10)
    await c.close()
    assert not g.held
    assert await other.inspect(k) is None, "released on close"
    await g.unlock()  # released by close: a no-op
    with pytest.raises(holdfast.ClientClosedError):
        await c.acquire(k, ttl=1)


async def test_list_and_watch(client: AsyncClient) -> None:
    prefix = key("list") + "/"
    events: list[str] = []
    synced = asyncio.Event()

    async def watch() -> None:
        async for ev in client.watch(prefix=prefix):
            if ev.type == "synced":
                synced.set()
            elif ev.state is not None:
                events.append(f"{ev.type}:{ev.state.key[len(prefix) :]}")

    task = asyncio.ensure_future(watch())
    await asyncio.wait_for(synced.wait(), 5)
    a = await client.acquire(prefix + "a", ttl=5)
    b = await client.acquire(prefix + "b", ttl=5)
    listed = [s.key[len(prefix) :] async for s in client.list(prefix, page_size=1)]
    assert listed == ["a", "b"]
    await a.unlock()
    await b.unlock()
    await eventually("four events", lambda: len(events) >= 4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["acquired:a", "acquired:b", "released:a", "released:b"]


@pytest.mark.parametrize("protocol", ["grpc-web"])
async def test_other_protocols(addr: str, protocol: str) -> None:
    async with AsyncClient(addr, protocol=protocol) as c:  # type: ignore[arg-type]
        g = await c.acquire(key(protocol), ttl=5)
        assert g.fencing_token > 0
        await g.unlock()


def test_sync_client(addr: str) -> None:
    k = key("sync")
    with holdfast.Client(addr, holder="py-sync") as c:
        with c.lock(k, ttl=0.6) as g:
            token = g.fencing_token
            # The watchdog runs on the client's thread while this one blocks.
            time.sleep(1.3)
            assert g.held and g.renewals >= 2
            st = c.inspect(k)
            assert st is not None and st.fencing_token == token and st.holder == "py-sync"
        assert c.inspect(k) is None
        assert c.with_lock(k, lambda guard: guard.fencing_token, ttl=5) > token
        g = c.acquire(k, ttl=5)
        lost = threading.Event()
        g.add_lost_callback(lambda e: lost.set())
        asyncio.run(_release_behind_its_back(addr, g._inner))
        # The next renewal (about TTL/3) answers extended=false.
        assert g.lost.wait(5) and lost.wait(1)
        with pytest.raises(LeaseLostError):
            _ = g.fencing_token
        with pytest.raises(LeaseLostError) as ei:
            g.unlock()
        assert ei.value.reason == "rejected"


async def test_unavailable_retried_within_wait_budget() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    async with AsyncClient(f"http://127.0.0.1:{port}") as c:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError):
            await c.acquire("k", ttl=1, wait=0.4)
        took = time.monotonic() - t0
        assert 0.2 <= took < 2.0, f"gave up after {took}s for a 0.4s budget"
