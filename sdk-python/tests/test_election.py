"""Leader election: a campaign is a lock's acquisition of an election key,
the leadership a guard whose fencing token is the term.

Validation needs no server (nothing is sent); the rest runs against a real
``holdfast serve`` on the memory backend (scripts/with-server.sh)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import holdfast
from holdfast import AsyncClient, InvalidArgumentError, LeaseLostError, LockReleasedError, NotAcquiredError, Observation
from holdfast.lock.v1 import lock_pb2

from .conftest import eventually, key, raw_client
from .test_behaviour import CountCalls, free_port, waiters

_REFUSED = [
    ("4097 bytes", "v" * 4097, r"^holdfast: value: 4097 bytes exceeds the maximum 4096 bytes$"),
    # 2049 characters, 4098 bytes: the limit counts bytes.
    ("2049 two-byte characters", "é" * 2049, r"^holdfast: value: 4098 bytes exceeds the maximum 4096 bytes$"),
    ("a lone surrogate", "a\ud800b", r"^holdfast: value: must be valid UTF-8$"),
    ("a NUL", "a\x00b", r"^holdfast: value: must not contain NUL \(found at byte 1\)$"),
]


@pytest.mark.parametrize(("what", "value", "message"), _REFUSED, ids=[r[0] for r in _REFUSED])
async def test_a_bad_value_is_refused_before_sending(what: str, value: str, message: str) -> None:
    counter = CountCalls()
    async with AsyncClient(f"127.0.0.1:{free_port()}", interceptors=[counter]) as c:
        for election in (c.election("e"), c.election("e", wait=0)):
            with pytest.raises(InvalidArgumentError, match=message) as e:
                await election.campaign(value)
            assert e.value.code == "invalid_argument"
    assert counter.calls == [], f"{what}: nothing was sent"


async def _next(it: AsyncIterator[Observation]) -> Observation:
    return await asyncio.wait_for(it.__anext__(), 10)


async def test_campaign_proclaim_observe_and_hand_over(client: AsyncClient, other: AsyncClient) -> None:
    k = key("election")
    it = other.election(k).observe().__aiter__()
    assert (await _next(it)).leader is None, "the first message of a free election"

    lead = await client.election(k, ttl=60, holder="node-a").campaign("10.0.0.1:80")
    term1 = lead.term
    assert lead.guard.kind == "election" and lead.value == "10.0.0.1:80" and lead.key == k
    o = await _next(it)
    assert o.leader is not None and (o.leader.term, o.leader.value, o.leader.holder) == (term1, "10.0.0.1:80", "node-a")
    ld = await other.election(k).leader()
    assert ld is not None and (ld.term, ld.value, ld.holder) == (term1, "10.0.0.1:80", "node-a")
    with pytest.raises(NotAcquiredError, match="led by 'node-a'"):
        await other.election(k, wait=0).campaign("b")

    await lead.proclaim("10.0.0.1:81")
    assert lead.value == "10.0.0.1:81"
    o = await _next(it)
    assert o.leader is not None, "the proclaimed value observed"
    assert (o.leader.term, o.leader.value) == (term1, "10.0.0.1:81"), "a proclaim keeps the term"

    nxt = asyncio.create_task(_campaign(other, k))
    await eventually("the next campaigner queued", lambda: _queued(client, k))
    await lead.resign()
    with pytest.raises(LockReleasedError):
        await lead.proclaim("late")
    second = await asyncio.wait_for(nxt, 10)
    assert second.term > term1, "the next leader's term is larger"
    o = await _next(it)
    if o.leader is None:  # the resignation may be seen before the next leader
        o = await _next(it)
    assert o.leader is not None and (o.leader.term, o.leader.value) == (second.term, "b")
    await second.resign()
    assert (await _next(it)).leader is None, "no leader after the last resignation"
    await it.aclose()  # type: ignore[attr-defined]
    assert await other.election(k).leader() is None


async def _campaign(c: AsyncClient, k: str) -> holdfast.AsyncLeadership:
    return await c.election(k, ttl=60).campaign("b")


async def _queued(c: AsyncClient, k: str) -> bool:
    return await waiters(c, k) >= 1


async def test_a_deposed_leaders_proclaim_poisons_it(addr: str) -> None:
    k = key("election-deposed")
    async with AsyncClient(addr) as c, raw_client(addr) as raw:
        owner: list[str] = []
        real = c._rpc.stub.acquire

        async def spy(req: Any, **kw: Any) -> Any:
            res = await real(req, **kw)
            owner.append(res.lease.owner_token)
            return res

        setattr(c._rpc.stub, "acquire", spy)  # noqa: B010 - the stub's method, replaced for the test
        lead = await c.election(k, ttl=60).campaign("v")
        rel = await raw.release(lock_pb2.ReleaseRequest(key=k, owner_token=owner[-1]))
        assert rel.released
        with pytest.raises(LeaseLostError) as e:
            await lead.proclaim("w")
        assert e.value.reason == "rejected"
        with pytest.raises(LeaseLostError):
            _ = lead.term
        assert not lead.held and lead.guard.lost.is_set()
        assert lead.value == "v", "a refused proclaim keeps the old value"
        with pytest.raises(LeaseLostError):
            await lead.resign()


async def test_async_with_resigns(client: AsyncClient, other: AsyncClient) -> None:
    k = key("election-with")
    async with client.election(k, ttl=60).campaign("v") as lead:
        ld = await other.election(k).leader()
        assert ld is not None and ld.term == lead.term
    assert await other.election(k).leader() is None


def test_the_blocking_client_campaigns_and_resigns(addr: str) -> None:
    k = key("election-sync")
    with holdfast.Client(addr) as c:
        with c.election(k, ttl=60).campaign("v") as lead:
            assert lead.held and lead.value == "v"
            lead.proclaim("w")
            ld = c.election(k).leader()
            assert ld is not None and (ld.term, ld.value) == (lead.term, "w")
        assert c.election(k).leader() is None
