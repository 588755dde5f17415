"""The asyncio client: acquire leases, keep them with a watchdog, fence work
with their tokens."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, Literal, TypeVar

import pyqwest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.interceptor import Interceptor
from connectrpc.protocol import ProtocolType

from . import _durations
from ._address import base_url
from ._durations import Duration
from ._election import AsyncElection
from ._guard import AsyncGuard, Session, from_duration, lease_target, to_duration
from ._options import Backoff, ExpiryMargin
from ._primitives import LOCK, Primitive
from ._rpc import Rpc, new_request_id
from ._timestamp import Timestamp
from ._transport import HttpxTransport, tls_verify
from .errors import (
    ClientClosedError,
    DeadlineExceededError,
    HoldfastError,
    InvalidArgumentError,
    NotAcquiredError,
    ServerError,
    from_connect_error,
    is_retryable,
)
from .events import LeaseEventListener
from .hlc import DEFAULT_MAX_OFFSET, Clock
from .lock.v1 import lock_pb2
from .lock.v1.lock_connect import LockServiceClient
from .types import (
    BackendInfo,
    EventType,
    Inspection,
    KeyDelay,
    LockEvent,
    LockState,
    Mode,
    RunResult,
    ServerInfo,
    kind_from_proto,
)

T = TypeVar("T")

DEFAULT_TTL = 15.0
"""Lease length when a call gives none, in seconds."""
DEFAULT_RETRY_BUDGET = 5.0
"""How long a call retries ``unavailable`` in a row, in seconds."""
DEFAULT_REQUEST_TIMEOUT = 10.0
"""Bound of one RPC attempt (a waiting Acquire's server wait excluded), in seconds."""
MAX_SERVER_WAIT = 300.0
"""The longest wait one Acquire asks the server for; a longer (or unbounded)
wait is several Acquires in a row."""

Protocol = Literal["connect", "grpc-web"]
_PROTOCOLS = {"connect": ProtocolType.CONNECT, "grpc-web": ProtocolType.GRPC_WEB}

_EVENT_TYPES: dict[int, EventType] = {
    lock_pb2.EVENT_TYPE_SYNCED: "synced",
    lock_pb2.EVENT_TYPE_ACQUIRED: "acquired",
    lock_pb2.EVENT_TYPE_RELEASED: "released",
    lock_pb2.EVENT_TYPE_EXPIRED: "expired",
    lock_pb2.EVENT_TYPE_PROCLAIMED: "proclaimed",
}


def default_holder() -> str:
    """``hostname:pid``, the label others see while this process holds a lock."""
    return f"{socket.gethostname()}:{os.getpid()}"


def request_headers(bearer_token: str | None, headers: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """The headers every request carries: the caller's, and the bearer token."""
    out: list[tuple[str, str]] = []
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not isinstance(value, str) or not name:
            raise InvalidArgumentError(f"holdfast: headers: {name!r}: {value!r}: names and values must be strings")
        if bearer_token is not None and name.lower() == "authorization":
            raise InvalidArgumentError(
                "holdfast: headers: give the token as bearer_token or an Authorization header, not both"
            )
        out.append((name, value))
    if bearer_token is not None:
        if not isinstance(bearer_token, str) or not bearer_token or any(c in bearer_token for c in "\r\n "):
            raise InvalidArgumentError("holdfast: bearer_token: want a non-empty string without spaces or line breaks")
        out.append(("authorization", f"Bearer {bearer_token}"))
    return out


class _Held:
    """An acquire's answer when the key (a key of the set) stayed held, or
    was in its lock-delay."""

    def __init__(self, current: LockState | None, delay: KeyDelay | None) -> None:
        self.current = current
        self.delay = delay


Keys = str | Sequence[str]
"""One key, or the keys of a multi-key lock (a list or tuple of str)."""


def key_list(key: Keys) -> tuple[str, ...]:
    """The keys of ``key``: one key, or a sequence of keys."""
    if isinstance(key, str):
        return (key,)
    keys = tuple(key)
    if not keys:
        raise InvalidArgumentError("holdfast: keys: an empty list; give at least one key")
    return keys


class AsyncClient:
    """A holdfast client for asyncio. Create one per process and share it::

        async with AsyncClient("http://127.0.0.1:7410") as client:
            async with client.lock("jobs/nightly", ttl=30) as guard:
                write(guard.fencing_token)

    Durations are seconds (int or float) or ``datetime.timedelta``.
    """

    def __init__(
        self,
        address: str,
        *,
        protocol: Protocol = "connect",
        holder: str | None = None,
        default_ttl: Duration = DEFAULT_TTL,
        retry_budget: Duration = DEFAULT_RETRY_BUDGET,
        request_timeout: Duration = DEFAULT_REQUEST_TIMEOUT,
        backoff: Backoff | None = None,
        expiry_margin: ExpiryMargin | None = None,
        max_clock_offset: Duration | None = None,
        clock: Clock | None = None,
        bearer_token: str | None = None,
        headers: Mapping[str, str] | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        interceptors: Sequence[Interceptor] = (),
        on_lease_event: LeaseEventListener | None = None,
    ) -> None:
        """
        Args:
            address: the server, ``http://host:port``, ``https://host:port``
                or ``host:port`` (meaning ``http://``).
            protocol: ``connect`` (default) or ``grpc-web``. (gRPC needs
                HTTP/2 trailers, which the HTTP stack does not read; the
                server answers all three on one port.)
            holder: label others see while this client holds a lock
                (default ``hostname:pid``).
            default_ttl: lease length when a call gives none (15 s).
            retry_budget: how long a call retries ``unavailable`` answers and
                transport failures in a row before it raises
                UnavailableError (5 s).
            request_timeout: bound of one RPC attempt, a waiting Acquire's
                server wait excluded (10 s).
            backoff: spacing of retries (50 ms doubling to 1 s, equal jitter).
            expiry_margin: how much earlier than the TTL the guard counts its
                lease as ended (1 % of the TTL plus 20 ms).
            max_clock_offset: server stamps further ahead than this are not
                merged (0.5 s). Ignored when clock is given.
            clock: the HLC to tick and merge into (default: a new one).
            bearer_token: sent as ``Authorization: Bearer <token>``.
            headers: extra headers on every request.
            ca_file: PEM file of the CA that signed the server's certificate.
            cert_file, key_file: PEM client certificate and key (mTLS).
            ssl_context: a ready ``ssl.SSLContext`` instead of the three files.
            interceptors: connectrpc client interceptors.
            on_lease_event: called with every LeaseEvent of this client's
                guards (renewed, renewal_failed, lost, released), on the
                event loop; what it raises is logged.
        """
        if protocol not in _PROTOCOLS:
            raise InvalidArgumentError(
                f"holdfast: protocol {protocol!r}: use one of {sorted(_PROTOCOLS)} "
                "(gRPC needs HTTP/2 trailers, which the Python SDK's HTTP stack does not read)"
            )
        url = base_url(address)
        verify = tls_verify(
            https=url.startswith("https://"),
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            ssl_context=ssl_context,
        )
        self._default_ttl = _durations.ttl(default_ttl, "default_ttl")
        retry_budget_s = _durations.positive("retry_budget", retry_budget)
        request_timeout_s = _durations.positive("request_timeout", request_timeout)
        offset = (
            DEFAULT_MAX_OFFSET if max_clock_offset is None else _durations.seconds("max_clock_offset", max_clock_offset)
        )
        if holder is not None and not isinstance(holder, str):
            raise InvalidArgumentError(f"holdfast: holder: {holder!r} is not a string")
        self._holder = holder if holder is not None else default_holder()
        self._transport = HttpxTransport(headers=request_headers(bearer_token, headers), verify=verify)
        stub = LockServiceClient(
            url,
            protocol=_PROTOCOLS[protocol],
            send_compression=None,
            # Lock messages are small; compressing them costs more than it saves.
            accept_compression=(),
            interceptors=interceptors,
            http_client=pyqwest.Client(self._transport),
        )
        self._rpc = Rpc(
            stub, retry_budget=retry_budget_s, request_timeout=request_timeout_s, backoff=backoff or Backoff()
        )
        self._session = Session(
            self._rpc, clock or Clock(max_offset=offset), expiry_margin or ExpiryMargin(), on_lease_event
        )
        # The longest wait one Acquire asks for: lowered to the server's
        # max_wait once a server refused a longer one.
        self._max_server_wait = MAX_SERVER_WAIT
        self._closed = False

    @property
    def clock(self) -> Clock:
        """The client's Hybrid Logical Clock: ticked for every request, merged with every server stamp."""
        return self._session.clock

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Releases the guards still held (retrying ``unavailable`` within the
        retry budget), stops their watchdogs and closes the connections. A
        guard whose release was not confirmed ends lost with reason
        ``client_closed``; its ``unlock()`` then raises that LeaseLostError.
        Further calls raise ClientClosedError."""
        if self._closed:
            return
        self._closed = True
        guards = list(self._session.guards)
        await asyncio.gather(*(g._close_for_client(self._rpc.retry_budget) for g in guards))
        await self._session.renewer.close()
        self._rpc.closed = True
        await self._rpc.close()
        await self._transport.aclose()

    # ---- acquiring ----

    def lock(
        self,
        key: str,
        *more: str,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
        lock_delay: Duration | None = None,
    ) -> LockContext:
        """A lock on key: ``async with client.lock(k, ttl=10) as guard:`` holds
        it for the block and releases it afterwards; ``guard = await
        client.lock(k)`` just acquires. Waits like acquire().

        With more keys, ``client.lock("accounts/1", "accounts/2")`` takes
        them together, all or none, in one atomic step of the server's
        backend, under one lease with a fencing token per key
        (``guard.fencing_token_for(key)``). Waiting sets and single keys are
        served in arrival order, and overlapping sets never deadlock. A
        multi-key lock needs a backend that takes sets
        (``BackendInfo.max_keys`` > 1; else the server answers
        ``unimplemented``)."""
        return LockContext(
            self, (key, *more), ttl=ttl, wait=wait, holder=holder, watchdog=watchdog, lock_delay=lock_delay
        )

    def semaphore(
        self,
        key: str,
        limit: int,
        *,
        permits: int | None = None,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
    ) -> LockContext:
        """A grant of permits (default 1) of the semaphore key, whose limit is
        the most permits held at once: ``async with client.semaphore("jobs",
        3, permits=2, ttl=30) as guard:`` holds 2 of its 3 permits for the
        block; ``await client.semaphore(...)`` just acquires, and the context
        also has ``try_acquire()`` and ``run_if_free(fn)``. Waits like
        acquire().

        Each grant is a lease of its own, with its own fencing token
        (strictly increasing over every grant of the key), renewed by the
        watchdog and poisoned on loss like a lock's (``guard.permits``,
        ``guard.limit``). The server fixes a key's kind and limit at its
        first grant: another limit, or a key used as a lock or rwlock, is
        refused with a ServerError whose code is ``failed_precondition``.
        limit must be at least 1 and permits 1 to limit (else
        InvalidArgumentError, before anything is sent); the server caps the
        limit (``BackendInfo.max_limit``). Waiters are served strictly in
        arrival order, so a large request is never overtaken by later small
        ones."""
        return LockContext(
            self,
            (key,),
            Primitive("semaphore", limit=limit, permits=permits),
            ttl=ttl,
            wait=wait,
            holder=holder,
            watchdog=watchdog,
        )

    def rwlock(self, key: str) -> AsyncRWLock:
        """The read-write lock key: ``async with client.rwlock("cfg").read()
        as guard:`` holds a shared grant (with other readers, never a
        writer), ``.write()`` an exclusive one. Grants are leases as locks
        are (``guard.mode`` says which). Waiters are served strictly in
        arrival order: a reader arriving behind a waiting writer waits for
        it. A key used as a lock or a semaphore is refused with a
        ServerError whose code is ``failed_precondition``."""
        return AsyncRWLock(self, key)

    def election(
        self,
        key: str,
        *,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
    ) -> AsyncElection:
        """Campaigns for the leadership of key: ``async with
        client.election("svc/primary", ttl=10).campaign("10.0.0.7:8080") as
        lead:`` queues behind earlier campaigners until it leads, and resigns
        at the end of the block. The Leadership is a guard (the same
        watchdog, the same poisoning) whose fencing token is the leader's
        term (``lead.term``) and whose lease carries a value that ``await
        lead.proclaim(v)`` replaces. ``await election.leader()`` reads the
        current leader; ``async for o in election.observe()`` streams every
        change. A key used as another kind is refused with a ServerError
        whose code is ``failed_precondition``."""
        return AsyncElection(self, key, ttl=ttl, wait=wait, holder=holder)

    async def acquire(
        self,
        key: str,
        *more: str,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
        lock_delay: Duration | None = None,
    ) -> AsyncGuard:
        """Takes the lease on key (and on every key of more, together, all or
        none: see lock()).

        ``wait=None`` (the default) queues on the server until the lock is
        acquired or the task is cancelled (``asyncio.timeout`` bounds it);
        ``wait=d`` queues for at most d, then raises NotAcquiredError carrying
        the holder's state; ``wait=0`` makes exactly one attempt. Cancelling
        the task takes the waiter off the server's queue at once and raises
        CancelledError.

        ``lock_delay=d``: if this lease expires (its holder stopped renewing
        it; not when it is released), its keys refuse new holders for d, so
        that the stalled holder's writes in flight drain before the next
        holder starts; waiters wait through it. None or 0 (the default) is
        none; the server caps it (``BackendInfo.max_lock_delay``) and needs a
        backend that keeps lock-delays (else ``unimplemented``)."""
        return await self._acquire_or_raise((key, *more), LOCK, ttl, wait, holder, watchdog, lock_delay)

    async def _acquire_or_raise(
        self,
        keys: tuple[str, ...],
        primitive: Primitive,
        ttl: Duration | None,
        wait: Duration | None,
        holder: str | None,
        watchdog: bool,
        lock_delay: Duration | None = None,
    ) -> AsyncGuard:
        """acquire's answer: the guard, or NotAcquiredError with the holder's state."""
        got = await self._acquire(keys, ttl, _durations.wait(wait), holder, watchdog, lock_delay, primitive)
        if isinstance(got, _Held):
            raise NotAcquiredError(keys[0], got.current, _durations.wait(wait), keys=keys, delay=got.delay)
        return got

    async def try_acquire(
        self,
        key: str,
        *more: str,
        ttl: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
        lock_delay: Duration | None = None,
    ) -> AsyncGuard | None:
        """Exactly one attempt, never queueing: the guard, or None when the
        key (a key of the set) is held. (``inspect`` says who holds it.)"""
        got = await self._acquire((key, *more), ttl, 0.0, holder, watchdog, lock_delay)
        return None if isinstance(got, _Held) else got

    async def with_lock(
        self,
        key: Keys,
        fn: Callable[[AsyncGuard], Awaitable[T]],
        *,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        lock_delay: Duration | None = None,
    ) -> T:
        """Runs ``await fn(guard)`` under the lock on key (or on every key of
        a list, together), acquired as acquire() does, and releases it
        afterwards; a lease lost during fn raises its LeaseLostError, unless
        fn raised."""
        async with self.lock(*key_list(key), ttl=ttl, wait=wait, holder=holder, lock_delay=lock_delay) as guard:
            return await fn(guard)

    async def run_if_free(
        self,
        key: Keys,
        fn: Callable[[AsyncGuard], Awaitable[T]],
        *,
        ttl: Duration | None = None,
        holder: str | None = None,
        lock_delay: Duration | None = None,
    ) -> RunResult:
        """Skip if held: one attempt at the lock; held, ``fn`` is not called
        and the answer is ``RunResult(ran=False)``. Free, ``await fn(guard)``
        runs under it (watchdog on), the lock is released afterwards and the
        answer is ``RunResult(ran=True, value=<what fn returned>)``. A lease
        lost during fn raises its LeaseLostError, as with_lock does. key may
        be a list of keys, taken together."""
        guard = await self.try_acquire(*key_list(key), ttl=ttl, holder=holder, lock_delay=lock_delay)
        if guard is None:
            return RunResult(False)
        async with guard:
            value = await fn(guard)
        return RunResult(True, value)

    async def run_scheduled(
        self,
        key: str,
        *,
        max_runtime: Duration,
        run: Callable[[int], Awaitable[T]],
        ttl: Duration | None = None,
        holder: str | None = None,
    ) -> RunResult:
        """A scheduled job that runs on one server at a time
        (docs/recipes/scheduled-jobs.md): one attempt at the lock, and
        ``RunResult(ran=False)`` without calling ``run`` when another server
        holds it. Otherwise ``await run(fencing_token)`` runs under a lease of
        ``ttl`` (default 1.5 x max_runtime; it must be longer than
        max_runtime) with the watchdog on, and is cancelled when the lease is
        lost (LeaseLostError) or at max_runtime (DeadlineExceededError); the
        lease is released afterwards. A lease lost during the run always
        raises, chained to the run's own error if it had one."""
        limit = _durations.positive("max_runtime", max_runtime)
        lease = 1.5 * limit if ttl is None else _durations.ttl(ttl)
        if lease <= limit:
            raise InvalidArgumentError(
                f"holdfast: ttl: {_durations.fmt(lease)} must be longer than max_runtime {_durations.fmt(limit)}"
            )
        guard = await self.try_acquire(key, ttl=lease, holder=holder)
        if guard is None:
            return RunResult(False)
        job = asyncio.ensure_future(run(guard.fencing_token))
        lost = asyncio.ensure_future(guard.lost.wait())
        try:
            await asyncio.wait({job, lost}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # The caller was cancelled: stop the run and let the key go.
            await _stop(job, lost)
            with contextlib.suppress(HoldfastError):
                await guard.unlock()
            raise
        await _stop(job, lost)
        overran = not guard.lost.is_set() and job.cancelled()
        run_error = None if job.cancelled() else job.exception()
        try:
            await guard.unlock()
        except HoldfastError as release_error:
            if run_error is not None:
                raise release_error from run_error
            raise
        if overran:
            raise DeadlineExceededError(
                f"holdfast: run_scheduled {key!r}: the run did not finish within max_runtime {_durations.fmt(limit)}"
            )
        return RunResult(True, job.result())

    async def _acquire(
        self,
        keys: tuple[str, ...],
        ttl: Duration | None,
        wait: float | None,
        holder: str | None,
        watchdog: bool,
        lock_delay: Duration | None = None,
        primitive: Primitive = LOCK,
    ) -> AsyncGuard | _Held:
        """The acquire loop. wait None: until acquired or cancelled; 0: one
        attempt; d: until d has passed. Transport failures and
        ``unavailable`` are retried with the backoff while the current run
        of failures stays within the retry budget (and, with a wait d, before
        d has passed). Every attempt carries the same request id: an attempt
        whose answer was lost may have taken the lease, and the retry is
        answered with it instead of waiting out its own orphan."""
        self._check_open()
        for k in keys:
            if not isinstance(k, str):
                raise InvalidArgumentError(
                    f"holdfast: key: {k!r} is not a string (several keys go as arguments: lock(k1, k2, ...))"
                )
        delay = 0.0 if lock_delay is None else _durations.non_negative("lock_delay", lock_delay)
        primitive.check(keys, delay)
        multi = len(keys) > 1
        key = keys[0]
        target: dict[str, Any] = {"claims": [lock_pb2.Claim(key=k) for k in keys]} if multi else {"key": key}
        rid = new_request_id()
        lease_ttl = self._default_ttl if ttl is None else _durations.ttl(ttl)
        self._session.expiry_margin.check(lease_ttl)
        if holder is not None and not isinstance(holder, str):
            raise InvalidArgumentError(f"holdfast: holder: {holder!r} is not a string")
        label = holder if holder is not None else self._holder
        rpc = self._rpc
        what = f"acquire {list(keys)!r}" if multi else f"acquire {key!r}"
        start = time.monotonic()
        deadline = None if wait is None else start + wait
        failing_since = start  # the first attempt of the current run of failures
        attempt = 0
        while True:
            self._check_open()
            sent_at = time.monotonic()
            cap = self._max_server_wait
            server_wait = cap if deadline is None else min(cap, max(0.0, deadline - sent_at))
            budget_end = failing_since + rpc.retry_budget
            if deadline is not None and wait:
                budget_end = min(budget_end, deadline)
            req = lock_pb2.AcquireRequest(
                **target,
                **primitive.request_fields(),
                ttl=to_duration(lease_ttl),
                holder=label,
                client_stamp=self._session.stamp(),
                request_id=rid,
            )
            if server_wait > 0:
                req.wait.CopyFrom(to_duration(server_wait))
            if delay > 0:
                req.lock_delay.CopyFrom(to_duration(delay))
            try:
                res = await rpc.attempt(
                    what,
                    functools.partial(rpc.stub.acquire, req),
                    server_wait + min(rpc.request_timeout, budget_end - sent_at),
                )
            except HoldfastError as err:
                # A failed acquire has an unknown outcome; if the server did
                # grant it, nobody renews that lease and it expires.
                refused_wait = isinstance(err, InvalidArgumentError) and server_wait > 0
                if refused_wait and await self._learn_max_wait(server_wait):
                    continue
                if not is_retryable(err):
                    raise
                await rpc.pause(what, err, attempt, failing_since, budget_end)
                attempt += 1
                continue
            attempt = 0
            failing_since = time.monotonic()
            self._session.merge(res.server_stamp if res.HasField("server_stamp") else None)
            if res.acquired:
                if not res.lease.owner_token or multi != (len(res.lease.keys) > 0):
                    raise ServerError(
                        f"holdfast: {what}: acquired=true without a lease, owner token and its keys", code="internal"
                    )
                self._session.merge(res.lease.stamp if res.lease.HasField("stamp") else None)
                if not primitive.granted_as_asked(res.lease):
                    await self._refuse_grant(res.lease, primitive, what)
                valid_from = await self._confirm(res.lease, sent_at)
                if valid_from is not None:
                    return AsyncGuard(self._session, res.lease, label, valid_from, watchdog)
                current, held_delay = None, None  # granted, then lost before use: try again while the wait lasts
            else:
                current = LockState.from_proto(res.current) if res.HasField("current") else None
                held_delay = KeyDelay.from_proto(res.delayed) if res.HasField("delayed") else None
            if deadline is not None and (wait == 0 or time.monotonic() >= deadline):
                return _Held(current, held_delay)
            # The server's wait ended before ours: queue again.

    async def _refuse_grant(self, lease: lock_pb2.Lease, primitive: Primitive, what: str) -> None:
        """A server that does not know kinds drops them and grants a lock:
        give that lease back (best effort; it expires by itself otherwise)
        and raise, rather than pass a lock off as a semaphore or rwlock
        grant."""
        rpc = self._rpc
        req = lock_pb2.ReleaseRequest(
            **lease_target(lease),
            owner_token=lease.owner_token,
            client_stamp=self._session.stamp(),
            request_id=new_request_id(),
        )
        with contextlib.suppress(HoldfastError):
            await rpc.attempt(what, lambda: rpc.stub.release(req), rpc.request_timeout)
        raise ServerError(
            f"holdfast: {what}: asked for a {primitive.kind}, the server granted a {kind_from_proto(lease.kind)}"
            f" (a server that does not know {primitive.kind}s?)",
            code="unimplemented",
        )

    async def _learn_max_wait(self, refused: float) -> bool:
        """After an Acquire asking for ``refused`` seconds of waiting was
        answered invalid_argument: whether the server's max_wait is shorter
        (then every later Acquire asks for at most that). A server refuses a
        wait above its --max-wait rather than capping it."""
        info = await self.server_info()
        if 0 < info.max_wait < refused:
            self._max_server_wait = info.max_wait
            return True
        return False

    async def _confirm(self, lease: lock_pb2.Lease, sent_at: float) -> float | None:
        """A lease whose Acquire answer came late (after a server-side wait)
        started on the server somewhere between sent_at and now: counting
        from sent_at, little or none of it may be left. One Extend sent now
        establishes a fresh local expiry. Returns the moment the lease is
        valid from, or None when it was lost before use."""
        ttl = from_duration(lease.ttl)
        if time.monotonic() - sent_at < ttl / 3:
            return sent_at
        now = time.monotonic()
        rpc = self._rpc
        req = lock_pb2.ExtendRequest(
            **lease_target(lease),
            owner_token=lease.owner_token,
            ttl=lease.ttl,
            client_stamp=self._session.stamp(),
            request_id=new_request_id(),
        )
        try:
            res = await rpc.attempt("acquire (confirming the lease)", lambda: rpc.stub.extend(req), rpc.request_timeout)
        except HoldfastError:
            # Still valid on the safe clock: hand it out, the watchdog renews at once.
            if time.monotonic() < sent_at + ttl - self._session.expiry_margin.of(ttl):
                return sent_at
            raise
        self._session.merge(res.server_stamp)
        if not res.extended:
            return None
        self._session.merge(res.lease.stamp if res.lease.HasField("stamp") else None)
        return now

    # ---- reading ----

    async def inspect(self, key: str) -> LockState | None:
        """Who holds key (None when free), without its owner token."""
        self._check_open()
        rpc = self._rpc
        res = await rpc.call(f"inspect {key!r}", lambda: rpc.stub.inspect(lock_pb2.InspectRequest(key=key)))
        self._session.merge(res.server_stamp)
        return LockState.from_proto(res.state) if res.held else None

    async def inspect_delay(self, key: str) -> Inspection:
        """inspect() that also reports a key nobody holds that is in its
        lock-delay: ``Inspection(state, None)`` when held,
        ``Inspection(None, delay)`` in its lock-delay, both None when free."""
        self._check_open()
        rpc = self._rpc
        res = await rpc.call(f"inspect {key!r}", lambda: rpc.stub.inspect(lock_pb2.InspectRequest(key=key)))
        self._session.merge(res.server_stamp)
        if res.held:
            return Inspection(LockState.from_proto(res.state), None)
        return Inspection(None, KeyDelay.from_proto(res.delayed) if res.HasField("delayed") else None)

    async def list(self, prefix: str = "", *, page_size: int = 0) -> AsyncIterator[LockState]:
        """Every held lock whose key starts with prefix, in key order (all pages)."""
        self._check_open()
        rpc = self._rpc
        token = ""
        while True:
            req = lock_pb2.ListRequest(prefix=prefix, page_size=page_size, page_token=token)
            res = await rpc.call(f"list {prefix!r}", functools.partial(rpc.stub.list, req))
            self._session.merge(res.server_stamp)
            for s in res.locks:
                yield LockState.from_proto(s)
            token = res.next_page_token
            if not token:
                return

    async def watch(self, *, key: str | None = None, prefix: str | None = None) -> AsyncIterator[LockEvent]:
        """Streams acquisitions, releases and expiries of one key or of every
        key under a prefix. The first event is "synced"."""
        self._check_open()
        if (key is None) == (prefix is None):
            raise InvalidArgumentError("holdfast: watch: give exactly one of key and prefix")
        req = lock_pb2.WatchRequest(key=key) if key is not None else lock_pb2.WatchRequest(prefix=prefix or "")
        try:
            async for ev in self._rpc.stub.watch(req):
                self._session.merge(ev.server_stamp)
                yield LockEvent(
                    type=_EVENT_TYPES.get(ev.type, "synced"),
                    state=LockState.from_proto(ev.state) if ev.HasField("state") else None,
                    stamp=Timestamp.from_proto(ev.server_stamp),
                )
        except ConnectError as e:
            if e.code == Code.CANCELED and isinstance(e.__cause__, asyncio.CancelledError):
                # The runtime reports the cancellation of the caller's task
                # as a canceled error; give the task its CancelledError back.
                raise e.__cause__ from None
            raise from_connect_error(e, "watch") from e
        except Exception as e:
            raise from_connect_error(e, "watch") from e

    async def server_info(self) -> ServerInfo:
        """The server's version and its backend's promises."""
        self._check_open()
        rpc = self._rpc
        res = await rpc.call("server info", lambda: rpc.stub.get_server_info(lock_pb2.GetServerInfoRequest()))
        self._session.merge(res.server_stamp)
        b = res.backend
        return ServerInfo(
            version=res.version,
            backend=BackendInfo(
                name=b.name,
                version=b.version,
                shared=b.shared,
                durable=b.durable,
                ttl_granularity=from_duration(b.ttl_granularity),
                min_ttl=from_duration(b.min_ttl),
                max_ttl=from_duration(b.max_ttl),
                fair=b.fair,
                max_keys=max(b.max_keys, 1),
                request_ids=lock_pb2.CAPABILITY_REQUEST_ID in b.capabilities,
                max_lock_delay=from_duration(b.max_lock_delay),
                # A server from before kinds says nothing: it keeps locks only.
                kinds=tuple(dict.fromkeys(["mutex", *(kind_from_proto(k) for k in b.kinds if k)])),
                max_limit=b.max_limit,
                rwlock_readers=b.rwlock_readers,
            ),
            max_clock_offset=from_duration(res.max_clock_offset),
            max_wait=from_duration(res.max_wait),
            stamp=Timestamp.from_proto(res.server_stamp),
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError()


async def _stop(*tasks: asyncio.Future[Any]) -> None:
    """Cancels the tasks still running and waits until they have ended."""
    running = {t for t in tasks if not t.done()}
    for t in running:
        t.cancel()
    if running:
        await asyncio.wait(running)


class LockContext:
    """Returned by AsyncClient.lock, semaphore and rwlock(...).read()/write():
    an async context manager that holds the lock (or grant) for its block,
    or an awaitable that just acquires it; ``try_acquire()`` and
    ``run_if_free(fn)`` make one attempt."""

    def __init__(self, client: AsyncClient, keys: tuple[str, ...], primitive: Primitive = LOCK, **opts: Any) -> None:
        self._client = client
        self._keys = keys
        self._primitive = primitive
        self._opts = opts
        self._guard: AsyncGuard | None = None

    async def acquire(self) -> AsyncGuard:
        """Takes it as AsyncClient.acquire does (waiting as ``wait`` says)."""
        o = self._opts
        return await self._client._acquire_or_raise(
            self._keys,
            self._primitive,
            o.get("ttl"),
            o.get("wait"),
            o.get("holder"),
            o.get("watchdog", True),
            o.get("lock_delay"),
        )

    async def try_acquire(self) -> AsyncGuard | None:
        """Exactly one attempt, never queueing (``wait`` is ignored): the
        guard, or None when the key is held (beyond the permits left)."""
        o = self._opts
        got = await self._client._acquire(
            self._keys,
            o.get("ttl"),
            0.0,
            o.get("holder"),
            o.get("watchdog", True),
            o.get("lock_delay"),
            self._primitive,
        )
        return None if isinstance(got, _Held) else got

    async def run_if_free(self, fn: Callable[[AsyncGuard], Awaitable[T]]) -> RunResult:
        """Skip if held, as AsyncClient.run_if_free: one attempt; held, fn is
        not called (``RunResult(ran=False)``); free, ``await fn(guard)`` runs
        under it and it is released afterwards."""
        guard = await self.try_acquire()
        if guard is None:
            return RunResult(False)
        async with guard:
            value = await fn(guard)
        return RunResult(True, value)

    def __await__(self) -> Generator[Any, None, AsyncGuard]:
        return self.acquire().__await__()

    async def __aenter__(self) -> AsyncGuard:
        self._guard = await self.acquire()
        return self._guard

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._guard is not None:
            await self._guard._exit(exc_type is not None)


class AsyncRWLock:
    """Returned by AsyncClient.rwlock: the read-write lock key, whose
    ``read()`` is a shared grant (many readers at once, never with a writer)
    and ``write()`` an exclusive one (nobody else, reader or writer)."""

    def __init__(self, client: AsyncClient, key: str) -> None:
        self._client = client
        self.key = key
        """The read-write lock's key."""

    def read(
        self,
        *,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
    ) -> LockContext:
        """A shared grant: held together with other readers, never with a writer."""
        return self._grant("shared", ttl=ttl, wait=wait, holder=holder, watchdog=watchdog)

    def write(
        self,
        *,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
    ) -> LockContext:
        """An exclusive grant: held by nobody else, reader or writer."""
        return self._grant("exclusive", ttl=ttl, wait=wait, holder=holder, watchdog=watchdog)

    def _grant(self, mode: Mode, **opts: Any) -> LockContext:
        return LockContext(self._client, (self.key,), Primitive("rwlock", mode=mode), **opts)
