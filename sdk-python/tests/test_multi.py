"""Several keys as one lease, lock-delay, and request ids (the same on a
call's retries), against a real ``holdfast serve`` on the memory backend
(scripts/with-server.sh), on both clients, and a server of the test's own
for a backend without those capabilities."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

import holdfast
from holdfast import (
    AsyncClient,
    Client,
    InvalidArgumentError,
    KeyDelay,
    LeaseEvent,
    LeaseLostError,
    LockReleasedError,
    NotAcquiredError,
    ServerError,
)
from holdfast.testing import run_server

from .conftest import eventually, key


def _record(c: AsyncClient, lose: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Records the request id of every Acquire, Extend and Release of c, and
    loses the answer to the first request of each method in lose: the
    server acted on it, the client hears unavailable (a connection cut
    after the request left)."""
    seen: dict[str, list[str]] = {}
    stub = c._rpc.stub
    for method in ("acquire", "extend", "release"):
        real: Callable[[Any], Awaitable[Any]] = getattr(stub, method)
        ids = seen.setdefault(method, [])
        to_lose = [method in lose]

        def wrap(real: Callable[[Any], Awaitable[Any]], ids: list[str], to_lose: list[bool]) -> Any:
            async def call(req: Any, **kw: Any) -> Any:
                ids.append(req.request_id)
                res = await real(req, **kw)
                if to_lose[0]:
                    to_lose[0] = False
                    raise ConnectError(Code.UNAVAILABLE, "connection reset (test: the answer was lost)")
                return res

            return call

        setattr(stub, method, wrap(real, ids, to_lose))
    return seen


async def test_a_set_is_taken_together_or_not_at_all(client: AsyncClient, other: AsyncClient) -> None:
    a, b = key("multi-a"), key("multi-b")
    held = await other.acquire(b, ttl=60)
    assert await client.try_acquire(a, b, ttl=60) is None, "a set with a held key is not acquired"
    with pytest.raises(NotAcquiredError) as ei:
        await client.acquire(a, b, ttl=60, wait=0)
    assert ei.value.keys == (a, b)
    assert ei.value.current is not None and ei.value.current.key == b, "names the held key"
    assert "held by 'py-test-b'" in str(ei.value)
    assert await client.inspect(a) is None, "the free key was not taken by a set that did not acquire"
    await held.unlock()

    async with client.lock(b, a, ttl=60) as g:
        assert g.keys == (b, a), "the keys in the order given"
        assert g.key == b
        with pytest.raises(InvalidArgumentError, match="fencing_token_for"):
            _ = g.fencing_token
        for k in g.keys:
            st = await other.inspect(k)
            assert st is not None and st.fencing_token == g.fencing_token_for(k), k
            assert st.holder == "py-test-a"
        with pytest.raises(InvalidArgumentError, match="not a key of this lease"):
            g.fencing_token_for("not-a-key")
        await g.extend(120)
    for k in (a, b):
        assert await other.inspect(k) is None, f"{k} still held after the set's unlock"
    with pytest.raises(LockReleasedError):
        g.fencing_token_for(a)


async def test_the_watchdog_renews_the_whole_set(addr: str, other: AsyncClient) -> None:
    events: list[LeaseEvent] = []
    a, b = key("multi-renew-a"), key("multi-renew-b")
    async with AsyncClient(addr, on_lease_event=events.append) as c:
        g = await c.acquire(a, b, ttl=0.3)
        # Three TTLs' worth of renewals: an unrenewed key would have expired.
        await eventually("three renewals", lambda: g.renewals >= 3)
        assert g.held
        for k in (a, b):
            assert await other.inspect(k) is not None, f"{k} expired under the watchdog"
        renewed = next(e for e in events if e.type == "renewed")
        assert renewed.keys == (a, b), "lease events name every key"
        await g.unlock()


async def test_a_set_granted_after_a_wait_longer_than_its_ttl_is_confirmed(
    client: AsyncClient, other: AsyncClient
) -> None:
    a, b = key("multi-late-a"), key("multi-late-b")
    held = await other.acquire(b, ttl=10)
    ttl = 0.5
    waiting = asyncio.ensure_future(client.acquire(a, b, ttl=ttl, wait=5))

    async def queued() -> bool:
        st = await other.inspect(b)
        return st is not None and st.waiters > 0

    await eventually("the set to queue", queued)
    await asyncio.sleep(ttl + 0.3)  # the stimulus: queued for longer than its TTL
    await held.unlock()
    g = await waiting
    assert g.held, g.lost_error
    start = time.monotonic()
    await eventually("2 TTLs to pass", lambda: time.monotonic() - start > 2 * ttl)
    assert g.held, g.lost_error
    for k in (a, b):
        st = await other.inspect(k)
        assert st is not None and st.fencing_token == g.fencing_token_for(k)
    await g.unlock()


async def test_with_lock_and_run_if_free_take_a_list_of_keys(client: AsyncClient, other: AsyncClient) -> None:
    keys = [key("multi-list-a"), key("multi-list-b")]

    async def check(g: holdfast.AsyncGuard) -> bool:
        st = await other.inspect(keys[1])
        return g.keys == tuple(keys) and st is not None and st.fencing_token == g.fencing_token_for(keys[1])

    assert await client.with_lock(keys, check, ttl=10)
    assert await client.run_if_free(keys, check, ttl=10) == (True, True)
    for k in keys:
        assert await other.inspect(k) is None


async def test_a_key_named_twice_is_refused_naming_the_claim(client: AsyncClient) -> None:
    k = key("multi-twice")
    with pytest.raises(InvalidArgumentError, match=r"claims\[1\]\.key"):
        await client.try_acquire(k, k)
    with pytest.raises(InvalidArgumentError, match="several keys go as arguments"):
        await client.acquire([k, k])  # type: ignore[arg-type]


def test_the_blocking_client_takes_sets_and_lock_delays(addr: str) -> None:
    a, b = key("sync-multi-a"), key("sync-multi-b")
    with Client(addr, holder="py-sync") as c:
        with c.lock(a, b, ttl=10, lock_delay=5) as g:
            assert g.keys == (a, b)
            st = c.inspect(b)
            assert st is not None and st.fencing_token == g.fencing_token_for(b)
            assert st.lock_delay == 5
            assert c.try_acquire(b) is None
            with pytest.raises(NotAcquiredError) as ei:
                c.acquire(b, a, wait=0)
            assert ei.value.keys == (b, a)
        assert c.inspect_delay(a) == (None, None), "a released lease leaves no lock-delay"
        assert c.run_if_free([a, b], lambda g: g.keys) == (True, (a, b))
        assert c.with_lock([a, b], lambda g: len(g.keys)) == 2


async def test_lock_delay_after_expiry_refuses_new_holders_then_waiters_get_the_key(client: AsyncClient) -> None:
    k = key("delay")
    delay = 1.0
    g = await client.acquire(k, ttl=0.2, lock_delay=delay, watchdog=False)
    st = await client.inspect(k)
    assert st is not None and st.lock_delay == delay, "inspect shows the lease's lock-delay"
    # Nobody renews it: it expires (locally first, then on the server).
    await asyncio.wait_for(g.lost.wait(), 5)
    lost_at = time.monotonic()
    found: list[KeyDelay] = []

    async def in_delay() -> bool:
        got = (await client.inspect_delay(k)).delay
        if got is not None:
            found.append(got)
        return got is not None

    await eventually("the key in its lock-delay", in_delay, timeout=delay)
    assert found[0].key == k and 0 < found[0].remaining <= delay, found[0]

    assert await client.try_acquire(k) is None, "a try in the lock-delay"
    with pytest.raises(NotAcquiredError) as ei:
        await client.acquire(k, wait=0)
    assert ei.value.current is None
    assert ei.value.delay is not None and ei.value.delay.key == k
    assert "lock-delay" in str(ei.value)

    nxt = await client.acquire(k, wait=10)
    waited = time.monotonic() - lost_at
    assert waited >= delay - 0.1, f"acquired {waited:.3f}s after the local expiry, within the delay {delay}s"
    await nxt.unlock()
    with pytest.raises(LeaseLostError):
        await g.unlock()


async def test_a_released_lease_leaves_no_lock_delay(client: AsyncClient) -> None:
    k = key("delay-released")
    g = await client.acquire(k, ttl=10, lock_delay=30)
    await g.unlock()
    again = await client.try_acquire(k)
    assert again is not None, "the key is free at once after a release"
    assert (await client.inspect_delay(k)).delay is None
    await again.unlock()


async def test_lock_delay_bounds(client: AsyncClient) -> None:
    with pytest.raises(InvalidArgumentError, match="lock_delay"):
        await client.try_acquire(key("delay-neg"), lock_delay=-5)
    info = await client.server_info()
    assert info.backend.max_lock_delay > 0, "memory keeps lock-delays"
    assert info.backend.max_keys > 1 and info.backend.request_ids
    with pytest.raises(InvalidArgumentError, match="lock_delay"):
        await client.try_acquire(key("delay-max"), lock_delay=info.backend.max_lock_delay + 1)


async def test_a_lost_acquire_answer_is_retried_with_the_same_id_into_the_same_lease(addr: str) -> None:
    async with AsyncClient(addr) as c:
        seen = _record(c, lose=("acquire",))
        a, b = key("rid-a"), key("rid-b")
        start = time.monotonic()
        # Without the id, the retry would queue behind its own orphan for its TTL.
        g = await c.acquire(a, b, ttl=60, wait=30)
        assert time.monotonic() - start < 3, "the retry waited instead of being answered with its lease"
        ids = seen["acquire"]
        assert len(ids) == 2, "the lost Acquire and its retry"
        assert len(ids[0]) >= 16
        assert ids[1] == ids[0], "one id for the acquisition's attempts"
        await g.extend()  # the lease the server holds is the guard's
        await g.unlock()
        second = await c.acquire(key("rid-other"), ttl=10)
        assert seen["acquire"][2] != ids[0], "every acquisition draws a fresh id"
        await second.unlock()


async def test_a_lost_release_answer_is_retried_with_the_same_id_and_confirmed(addr: str) -> None:
    async with AsyncClient(addr) as c:
        seen = _record(c, lose=("release",))
        k = key("rid-release")
        g = await c.acquire(k, ttl=60)
        await g.unlock()  # not release_unconfirmed: the server recognised the repeat
        ids = seen["release"]
        assert len(ids) == 2 and ids[0] and ids[1] == ids[0]
        assert await c.inspect(k) is None


async def test_a_lost_extend_answer_is_retried_with_the_same_id(addr: str) -> None:
    async with AsyncClient(addr) as c:
        seen = _record(c, lose=("extend",))
        g = await c.acquire(key("rid-extend"), ttl=60, watchdog=False)
        await g.extend()
        await g.extend()
        ids = seen["extend"]
        assert len(ids) == 3, "the lost Extend, its retry, and the second extend"
        assert ids[0] and ids[1] == ids[0] and ids[2] != ids[0]
        assert g.renewals == 2
        await g.unlock()


async def test_a_server_that_takes_one_key_per_request_answers_unimplemented(server_binary: str) -> None:
    # --max-keys 1 leaves the server as a backend that takes one key per request.
    with run_server("--max-keys", "1", binary=server_binary) as server:
        async with AsyncClient(server.address) as c:
            assert (await c.server_info()).backend.max_keys == 1
            with pytest.raises(ServerError) as ei:
                await c.try_acquire(key("cap-a"), key("cap-b"))
            assert ei.value.code == "unimplemented"
            assert "CAPABILITY_MULTI_KEY" in str(ei.value)
            # Not retried: a single key still works at once.
            g = await c.acquire(key("cap-one"), ttl=10)
            await g.unlock()
