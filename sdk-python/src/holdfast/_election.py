"""Leader election: a fourth kind of key (``election``, docs/primitives.md).

One lease at a time, like a lock, whose holder is the leader; the lease
carries a value (what the leader is known by) that the leader replaces with
``proclaim`` and everyone reads with ``leader()`` and ``observe()``; its
fencing token is the leader's term. A campaign is an acquisition (waiting
campaigners are served in arrival order), resigning is unlocking, and the
leadership is renewed by the client's one watchdog and poisoned when lost,
exactly as a lock's guard.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator
from typing import Any, Protocol

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from ._durations import Duration
from ._guard import AsyncGuard, Session
from ._primitives import Primitive, check_value
from ._rpc import Rpc
from ._timestamp import Timestamp
from .errors import LeaseLostError, UnavailableError, from_connect_error
from .lock.v1 import lock_pb2
from .types import Leader, LockState, Observation


class _Client(Protocol):
    """What an election needs of AsyncClient (a Protocol, so that this
    module does not import _async, which imports it)."""

    _rpc: Rpc
    _session: Session

    def _check_open(self) -> None: ...

    async def inspect(self, key: str) -> LockState | None: ...

    async def _acquire_or_raise(
        self,
        keys: tuple[str, ...],
        primitive: Primitive,
        ttl: Duration | None,
        wait: Duration | None,
        holder: str | None,
        watchdog: bool,
        lock_delay: Duration | None = None,
    ) -> AsyncGuard: ...


class AsyncElection:
    """Returned by AsyncClient.election: campaigns for the leadership of one
    key with the lock's TTL, wait and holder (the same defaults: the
    client's TTL; no wait = queue until leader or cancelled; ``wait=0`` one
    attempt)."""

    def __init__(self, client: _Client, key: str, **opts: Any) -> None:
        self._client = client
        self.key = key
        """The election's key."""
        self._opts = opts

    def campaign(self, value: str) -> CampaignContext:
        """Becomes the leader with value (0 to 4096 bytes of UTF-8), queueing
        behind earlier campaigners as ``wait`` says: ``lead = await
        election.campaign(v)``, or ``async with election.campaign(v) as
        lead:``, which resigns at the end of the block. Raises
        NotAcquiredError (with the current leader's state) when the wait runs
        out, InvalidArgumentError for a bad value before anything is sent."""
        return CampaignContext(self, value)

    async def leader(self) -> Leader | None:
        """The current leader, or None when nobody leads (one read of the key)."""
        st: LockState | None = await self._client.inspect(self.key)
        return Leader.from_state(st) if st is not None else None

    async def observe(self) -> AsyncIterator[Observation]:
        """Streams the election's leader: first, once the server established
        the stream, the current leader (or None), then one Observation per
        change (a new leader, a new value, no leader). Two in a row never say
        the same thing and terms never go back. Ends when the caller stops
        iterating or its task is cancelled; a failure, the server ending the
        stream (UnavailableError: observe again) or the client closing
        raises."""
        client = self._client
        client._check_open()
        session = client._session
        what = f"observe {self.key!r}"
        try:
            async for msg in client._rpc.stub.observe(lock_pb2.ObserveRequest(key=self.key)):
                session.merge(msg.server_stamp)
                has = msg.HasField("leader")
                session.merge(msg.leader.stamp if has and msg.leader.HasField("stamp") else None)
                yield Observation(
                    leader=Leader.from_proto(msg.leader) if has else None,
                    stamp=Timestamp.from_proto(msg.server_stamp),
                )
        except ConnectError as e:
            if e.code == Code.CANCELED and isinstance(e.__cause__, asyncio.CancelledError):
                # The runtime reports the cancellation of the caller's task
                # as a canceled error; give the task its CancelledError back.
                raise e.__cause__ from None
            client._check_open()
            raise from_connect_error(e, what) from e
        client._check_open()
        raise UnavailableError(f"holdfast: {what}: the server ended the observation")

    async def _campaign(self, value: str) -> AsyncLeadership:
        o = self._opts
        guard = await self._client._acquire_or_raise(
            (self.key,), Primitive("election", value=value), o.get("ttl"), o.get("wait"), o.get("holder"), True, None
        )
        return AsyncLeadership(guard)


class CampaignContext:
    """Returned by AsyncElection.campaign: an awaitable that campaigns, or an
    async context manager that leads for its block and resigns after it."""

    def __init__(self, election: AsyncElection, value: str) -> None:
        self._election = election
        self._value = value
        self._lead: AsyncLeadership | None = None

    def __await__(self) -> Generator[Any, None, AsyncLeadership]:
        return self._election._campaign(self._value).__await__()

    async def __aenter__(self) -> AsyncLeadership:
        self._lead = await self._election._campaign(self._value)
        return self._lead

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._lead is not None:
            await self._lead.guard._exit(exc_type is not None)


class AsyncLeadership:
    """A won campaign: the leadership's guard (renewed by the client's
    watchdog, poisoned when lost: its ``lost`` and ``done`` events, its lost
    callbacks) seen as a leader."""

    def __init__(self, guard: AsyncGuard) -> None:
        self.guard = guard
        """The guard underneath: ``held``, ``lost``, ``done``, ``remaining()``
        and ``add_lost_callback`` are the leadership's."""

    @property
    def key(self) -> str:
        """The election's key."""
        return self.guard.key

    @property
    def holder(self) -> str:
        """The label the leadership was campaigned with."""
        return self.guard.holder

    @property
    def term(self) -> int:
        """The leadership's term (its fencing token): strictly larger than
        every earlier leader's. Raises LeaseLostError once lost,
        LockReleasedError after resign()."""
        return self.guard.fencing_token

    @property
    def value(self) -> str:
        """The leadership's value: the campaign's, or the last proclaimed."""
        return self.guard.value

    @property
    def held(self) -> bool:
        """True while this client believes it leads."""
        return self.guard.held

    @property
    def lost_error(self) -> LeaseLostError | None:
        """Why the leadership was lost, if it was."""
        return self.guard.lost_error

    @property
    def stamp(self) -> Timestamp:
        """HLC stamp of the leadership's acquisition."""
        return self.guard.stamp

    async def proclaim(self, value: str) -> None:
        """Replaces the leadership's value if it still leads; the term, TTL
        and stamp stay. Raises the LeaseLostError (poisoning the leadership,
        reason ``rejected``) when the server answers that it no longer leads,
        LockReleasedError after resign(), InvalidArgumentError for a bad value
        (nothing sent). ``unavailable`` is retried within the retry budget and
        the local expiry."""
        check_value(value)
        await self.guard._proclaim(value)

    async def resign(self) -> None:
        """Gives the leadership up (the guard's unlock()): returns only when
        the server confirmed; raises the LeaseLostError when it was already
        lost."""
        await self.guard.unlock()

    async def __aenter__(self) -> AsyncLeadership:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        await self.guard._exit(exc_type is not None)

    def __repr__(self) -> str:
        return f"AsyncLeadership({self.key!r}, term {self.guard._fencing_token})"
