"""Semaphores and read-write locks: the same acquire loop and guard as a lock.

Validation needs no server (nothing is sent); the rest runs against a real
``holdfast serve`` on the memory backend (scripts/with-server.sh), on both
clients."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import holdfast
from holdfast import (
    AsyncClient,
    AsyncGuard,
    InvalidArgumentError,
    LeaseLostError,
    LockContext,
    NotAcquiredError,
    ServerError,
)
from holdfast.lock.v1 import lock_pb2

from .conftest import eventually, key, raw_client
from .test_behaviour import CountCalls, free_port, waiters

# ---- validation, before anything is sent ----

_REFUSED: list[tuple[str, Callable[[AsyncClient], LockContext], str]] = [
    ("a limit of 0", lambda c: c.semaphore("k", 0), r"^holdfast: limit: 0: a semaphore needs a limit of at least 1"),
    ("a negative limit", lambda c: c.semaphore("k", -2), r"^holdfast: limit: -2: "),
    ("a fractional limit", lambda c: c.semaphore("k", 2.5), r"^holdfast: limit: 2.5: .*whole number"),  # type: ignore[arg-type]
    (
        "0 permits",
        lambda c: c.semaphore("k", 3, permits=0),
        r"^holdfast: permits: 0 is below 1: a grant takes 1 to the semaphore's limit \(3\) permits",
    ),
    (
        "permits above the limit",
        lambda c: c.semaphore("k", 3, permits=4),
        r"^holdfast: permits: 4 is above the semaphore's limit 3$",
    ),
    (
        "fractional permits",
        lambda c: c.semaphore("k", 3, permits=1.5),  # type: ignore[arg-type]
        r"^holdfast: permits: 1.5 is not a whole number$",
    ),
]


@pytest.mark.parametrize(("what", "make", "message"), _REFUSED, ids=[r[0] for r in _REFUSED])
async def test_a_bad_limit_or_permits_is_refused_before_sending(
    what: str, make: Callable[[AsyncClient], LockContext], message: str
) -> None:
    counter = CountCalls()
    async with AsyncClient(f"127.0.0.1:{free_port()}", interceptors=[counter]) as c:
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: make(c).acquire(),
            lambda: make(c).try_acquire(),
            lambda: make(c).run_if_free(_never),
        ]
        for call in calls:
            with pytest.raises(InvalidArgumentError, match=message) as ei:
                await call()
            assert ei.value.code == "invalid_argument", what
        assert counter.calls == [], "nothing was sent"


async def _never(_: AsyncGuard) -> None:
    pytest.fail("fn ran")


def test_the_blocking_client_refuses_them_too() -> None:
    with holdfast.Client(f"127.0.0.1:{free_port()}") as c:
        with pytest.raises(InvalidArgumentError, match="above the semaphore's limit 3"):
            c.semaphore("k", 3, permits=4).acquire()
        with pytest.raises(InvalidArgumentError, match="limit: 0"), c.semaphore("k", 0):
            pytest.fail("entered the block")


# ---- semaphores ----


async def test_a_semaphore_grants_permits_up_to_its_limit(client: AsyncClient, other: AsyncClient) -> None:
    k = key("sem")
    two = await client.semaphore(k, 3, permits=2, ttl=10)
    assert (two.kind, two.limit, two.permits, two.mode) == ("semaphore", 3, 2, "exclusive")
    one = await other.semaphore(k, 3, ttl=10)
    assert one.permits == 1, "permits default to 1"
    assert one.fencing_token > two.fencing_token, "fencing tokens increase over the grants of a key"

    assert await other.semaphore(k, 3).try_acquire() is None, "a 4th permit of 3 is not granted"
    with pytest.raises(NotAcquiredError) as ei:
        await other.semaphore(k, 3, wait=0).acquire()
    cur = ei.value.current
    assert cur is not None
    assert (cur.kind, cur.limit, cur.permits_in_use) == ("semaphore", 3, 3)
    assert [(h.holder, h.permits, h.fencing_token) for h in cur.holders] == [
        ("py-test-a", 2, two.fencing_token),
        ("py-test-b", 1, one.fencing_token),
    ]
    assert str(ei.value) == f"holdfast: lock {k!r} not acquired: semaphore with 3 of 3 permits in use by 2 holders"

    await two.unlock()
    again = await other.semaphore(k, 3, permits=2, ttl=10).try_acquire()
    assert again is not None, "the released permits are free again"
    assert again.fencing_token > one.fencing_token
    await again.unlock()
    await one.unlock()
    assert await client.inspect(k) is None, "free once every grant is released"


async def test_racing_clients_never_hold_more_than_the_limit(addr: str, client: AsyncClient) -> None:
    k = key("sem-race")
    limit = 3
    inside = most = entered = 0
    tokens: list[int] = []

    async def hold(guard: AsyncGuard) -> None:
        nonlocal inside, most, entered
        tokens.append(guard.fencing_token)
        inside += 1
        most = max(most, inside)
        entered += 1
        # The first grants hold on until the limit was reached (most, not
        # inside: the last of them leaves at once): the semaphore must let
        # that many in at once. Later ones hold across a round trip, so that
        # they overlap as they come.
        if entered <= limit:
            await eventually(f"{limit} holders at once", lambda: most >= limit, 10)
        else:
            await client.inspect(k)
        inside -= 1

    async def racer(i: int) -> None:
        async with AsyncClient(addr, holder=f"py-racer-{i}") as c:
            for _ in range(3):
                async with c.semaphore(k, limit, ttl=10, wait=30) as g:
                    await hold(g)

    await asyncio.gather(*(racer(i) for i in range(8)))
    assert most == limit, f"{most} holders at once on a semaphore of {limit}"
    assert len(tokens) == 24 and len(set(tokens)) == 24, "every grant has its own fencing token"


async def test_a_waiting_grant_is_served_and_renewed(client: AsyncClient, other: AsyncClient) -> None:
    k = key("sem-wait")
    held = await client.semaphore(k, 2, permits=2, ttl=10)
    waiting = asyncio.ensure_future(other.semaphore(k, 2, ttl=0.3, wait=10).acquire())
    await eventually("the grant to queue", lambda: _queued(client, k, 1))
    await held.unlock()
    g = await waiting
    # Three TTLs' worth of renewals: an unrenewed grant would have expired.
    await eventually("three renewals", lambda: g.renewals >= 3)
    assert g.held
    st = await client.inspect(k)
    assert st is not None and st.fencing_token == g.fencing_token, "the grant is still the server's"
    await g.unlock()


async def _queued(c: AsyncClient, k: str, n: int) -> bool:
    return await waiters(c, k) >= n


async def test_a_grant_released_behind_its_back_is_poisoned(addr: str, client: AsyncClient) -> None:
    k = key("sem-lost")
    async with AsyncClient(addr) as c, raw_client(addr) as raw:
        owner: list[str] = []
        real = c._rpc.stub.acquire

        async def spy(req: Any, **kw: Any) -> Any:
            res = await real(req, **kw)
            owner.append(res.lease.owner_token)
            return res

        setattr(c._rpc.stub, "acquire", spy)  # noqa: B010 - the stub's method, replaced for the test
        other = await client.semaphore(k, 2, ttl=10)
        g = await c.semaphore(k, 2, ttl=0.3)
        rel = await raw.release(lock_pb2.ReleaseRequest(key=k, owner_token=owner[-1]))
        assert rel.released
        await asyncio.wait_for(g.lost.wait(), 2)
        assert g.lost_error is not None and g.lost_error.reason == "rejected"
        with pytest.raises(LeaseLostError):
            _ = g.fencing_token
        assert other.held, "the other grant of the key is untouched"
        st = await client.inspect(k)
        assert st is not None and st.fencing_token == other.fencing_token
        await other.unlock()


async def test_another_limit_or_kind_is_failed_precondition_at_once(addr: str, client: AsyncClient) -> None:
    k = key("sem-mismatch")
    counter = CountCalls()
    g = await client.semaphore(k, 3, ttl=10)
    try:
        async with AsyncClient(addr, interceptors=[counter]) as c:
            calls: dict[str, Callable[[], Awaitable[object]]] = {
                "another limit": lambda: c.semaphore(k, 4, wait=5).acquire(),
                "a lock": lambda: c.acquire(k, wait=5),
                "an rwlock": lambda: c.rwlock(k).write().try_acquire(),
            }
            for what, call in calls.items():
                counter.calls.clear()
                with pytest.raises(ServerError) as ei:
                    await call()
                assert ei.value.code == "failed_precondition", what
                assert counter.calls == ["Acquire"], f"{what}: one Acquire, not retried"
    finally:
        await g.unlock()


async def test_a_mutex_granted_for_a_semaphore_is_given_back(addr: str, client: AsyncClient) -> None:
    """A server from before kinds drops them and grants a lock: the SDK gives
    it back and refuses it as unimplemented."""
    k = key("sem-old-server")
    async with AsyncClient(addr) as c:
        real = c._rpc.stub.acquire

        async def drop_kind(req: Any, **kw: Any) -> Any:
            res = await real(req, **kw)
            res.lease.kind = lock_pb2.KIND_UNSPECIFIED
            return res

        setattr(c._rpc.stub, "acquire", drop_kind)  # noqa: B010 - the stub's method, replaced for the test
        with pytest.raises(ServerError, match="asked for a semaphore, the server granted a mutex") as ei:
            await c.semaphore(k, 2, ttl=10)
        assert ei.value.code == "unimplemented"
    assert await client.inspect(k) is None, "the grant was released"


async def test_list_and_watch_show_a_semaphores_grants(client: AsyncClient, other: AsyncClient) -> None:
    k = key("sem-state")
    events = client.watch(key=k)
    try:
        assert (await anext(events)).type == "synced"
        g1 = await client.semaphore(k, 4, permits=3, ttl=10)
        g2 = await other.semaphore(k, 4, ttl=10)
        t1, t2 = g1.fencing_token, g2.fencing_token
        for g in (g1, g2):
            ev = await asyncio.wait_for(anext(events), 5)
            assert ev.type == "acquired" and ev.state is not None
            assert (ev.state.kind, ev.state.limit) == ("semaphore", 4)
            assert [(h.fencing_token, h.permits) for h in ev.state.holders] == [(g.fencing_token, g.permits)]
        listed = [s async for s in client.list(k)]
        assert len(listed) == 1, "one key"
        assert [(h.fencing_token, h.holder, h.permits) for h in listed[0].holders] == [
            (t1, "py-test-a", 3),
            (t2, "py-test-b", 1),
        ]
        assert listed[0].permits_in_use == 4
        await g1.unlock()
        released = await asyncio.wait_for(anext(events), 5)
        assert released.type == "released" and released.state is not None
        assert released.state.holders[0].fencing_token == t1, "the released grant"
        await g2.unlock()
    finally:
        await events.aclose()  # type: ignore[attr-defined]


class _Batches:
    """Records the keys of every ExtendBatch and counts plain Extends."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.extends = 0

    async def intercept_unary(self, call_next: Callable[[Any, Any], Awaitable[Any]], request: Any, ctx: Any) -> Any:
        name = ctx.method().name
        if name == "ExtendBatch":
            self.batches.append([it.key for it in request.items])
        elif name == "Extend":
            self.extends += 1
        return await call_next(request, ctx)


async def test_the_clients_watchdog_renews_grants_with_its_locks(addr: str, client: AsyncClient) -> None:
    """One watchdog per client: grants go into its ExtendBatch calls, each by its own token."""
    rec = _Batches()
    sem, rw, plain = key("renew-sem"), key("renew-rw"), key("renew-lock")
    ttl = 0.9
    async with AsyncClient(addr, interceptors=[rec]) as c:
        gs = [
            await c.semaphore(sem, 3, permits=2, ttl=ttl),
            await c.semaphore(sem, 3, ttl=ttl),
            await c.rwlock(rw).read(ttl=ttl),
            await c.acquire(plain, ttl=ttl),
        ]
        await eventually("two renewals of every guard", lambda: all(g.renewals >= 2 for g in gs), 3 * ttl)
        assert all(g.held for g in gs), [str(g.lost_error) for g in gs if not g.held]
        assert rec.extends == 0, "plain Extends to a server that batches"
        assert any(b.count(sem) == 2 for b in rec.batches), f"no batch renewed both grants: {rec.batches}"
        st = await client.inspect(sem)
        assert st is not None and [h.fencing_token for h in st.holders] == [gs[0].fencing_token, gs[1].fencing_token]
        for g in gs:
            await g.unlock()


async def test_server_info_says_which_kinds_the_backend_keeps(client: AsyncClient) -> None:
    info = await client.server_info()
    assert sorted(info.backend.kinds) == ["election", "mutex", "rwlock", "semaphore"]
    assert info.backend.max_limit >= 1
    assert info.backend.rwlock_readers >= 1


# ---- read-write locks ----


async def test_readers_share_and_a_writer_holds_alone(client: AsyncClient, other: AsyncClient) -> None:
    k = key("rw")
    r1 = await client.rwlock(k).read(ttl=10)
    r2 = await other.rwlock(k).read(ttl=10)
    for r in (r1, r2):
        assert (r.kind, r.permits, r.mode) == ("rwlock", 1, "shared")
    assert r2.fencing_token > r1.fencing_token
    assert await other.rwlock(k).write().try_acquire() is None, "a writer does not join readers"
    with pytest.raises(NotAcquiredError, match=r"not acquired: read by 2 holders$"):
        await other.rwlock(k).write(wait=0).acquire()

    writing = asyncio.ensure_future(other.rwlock(k).write(ttl=10, wait=10).acquire())
    await eventually("the writer to queue", lambda: _queued(client, k, 1))
    last_reader = r2.fencing_token
    await r1.unlock()
    await r2.unlock()
    w = await writing
    assert (w.kind, w.permits, w.mode, w.limit) == ("rwlock", r1.limit, "exclusive", r1.limit), "a writer holds it all"
    assert w.limit == (await client.server_info()).backend.rwlock_readers
    assert w.fencing_token > last_reader
    assert await client.rwlock(k).read().try_acquire() is None, "a reader does not join a writer"
    with pytest.raises(NotAcquiredError, match=r"not acquired: written by 'py-test-b' \(fencing token \d+\)$"):
        await client.rwlock(k).read(wait=0).acquire()
    assert await client.rwlock(k).write().try_acquire() is None, "nor does another writer"
    st = await client.inspect(k)
    assert st is not None and st.kind == "rwlock" and [h.mode for h in st.holders] == ["exclusive"]
    await w.unlock()


async def test_a_reader_behind_a_waiting_writer_waits_for_it(client: AsyncClient, other: AsyncClient) -> None:
    k = key("rw-fifo")
    r1 = await client.rwlock(k).read(ttl=10)
    order: list[str] = []

    async def take(ctx: LockContext, name: str) -> AsyncGuard:
        g = await ctx.acquire()
        order.append(name)
        return g

    writing = asyncio.ensure_future(take(other.rwlock(k).write(ttl=10, wait=10), "writer"))
    await eventually("the writer to queue", lambda: _queued(client, k, 1))
    reading = asyncio.ensure_future(take(client.rwlock(k).read(ttl=10, wait=10), "reader"))
    await eventually("the reader to queue behind it", lambda: _queued(client, k, 2))
    await r1.unlock()
    w = await writing
    assert order == ["writer"], "the reader did not overtake the waiting writer"
    await w.unlock()
    r2 = await reading
    assert order == ["writer", "reader"]
    await r2.unlock()


def test_the_blocking_client_takes_grants(addr: str) -> None:
    k = key("rw-blocking")
    with holdfast.Client(addr, holder="py-sync") as c:
        with c.rwlock(k).read(ttl=10) as r:
            assert (r.kind, r.mode, r.permits) == ("rwlock", "shared", 1)
            assert c.rwlock(k).write().try_acquire() is None
            ran = c.rwlock(k).read().run_if_free(lambda g: g.fencing_token)
            assert ran.ran and ran.value > r.fencing_token, "a second reader ran beside the first"
        s = c.semaphore(k + "/sem", 2, permits=2, ttl=10).acquire()
        assert (s.kind, s.limit, s.permits) == ("semaphore", 2, 2)
        assert c.semaphore(k + "/sem", 2).try_acquire() is None
        s.unlock()
        assert c.inspect(k) is None and c.inspect(k + "/sem") is None
