"""The blocking client: an AsyncClient on an event loop of its own in a
background thread, so that guards keep renewing while the caller's thread
does blocking work. It takes the same options and behaves the same."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from connectrpc.interceptor import Interceptor

from . import _durations
from ._async import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RETRY_BUDGET,
    DEFAULT_TTL,
    AsyncClient,
    AsyncRWLock,
    Keys,
    LockContext,
    Protocol,
    key_list,
)
from ._durations import Duration
from ._election import AsyncElection, AsyncLeadership
from ._guard import AsyncGuard
from ._options import Backoff, ExpiryMargin
from ._timestamp import Timestamp
from .errors import DeadlineExceededError, HoldfastError, InvalidArgumentError, LeaseLostError
from .events import LeaseEventListener
from .hlc import Clock
from .types import Inspection, Kind, Leader, LockEvent, LockState, Mode, Observation, RunResult, ServerInfo

T = TypeVar("T")
E = TypeVar("E")
S = TypeVar("S", bound="_LoopStream[Any]")


class _LoopThread:
    """One event loop on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="holdfast-client", daemon=True)
        self.thread.start()
        started.wait()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs coro on the loop and waits for it. Interrupted (Ctrl-C), the
        caller cancels it: a waiting acquire leaves the server's queue."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError(
                "holdfast: the blocking client cannot be called from its own loop thread (a callback or listener?)"
            )
        fut: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()
            raise

    def stop(self) -> None:
        """Stops the loop and joins its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Client:
    """A blocking holdfast client::

        with Client("http://127.0.0.1:7410") as client:
            with client.lock("jobs/nightly", ttl=30) as guard:
                write(guard.fencing_token)

    It takes the same arguments as AsyncClient and answers the same way.
    Durations are seconds (int or float) or ``datetime.timedelta``. Lost
    callbacks and the lease event listener run on the client's background
    thread and must not call the client.
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
        """Takes AsyncClient's arguments (see there)."""
        self._loop = _LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(
                address,
                protocol=protocol,
                holder=holder,
                default_ttl=default_ttl,
                retry_budget=retry_budget,
                request_timeout=request_timeout,
                backoff=backoff,
                expiry_margin=expiry_margin,
                max_clock_offset=max_clock_offset,
                clock=clock,
                bearer_token=bearer_token,
                headers=headers,
                ca_file=ca_file,
                cert_file=cert_file,
                key_file=key_file,
                ssl_context=ssl_context,
                interceptors=interceptors,
                on_lease_event=on_lease_event,
            )

        try:
            self._async = self._loop.run(make())
        except BaseException:
            self._loop.stop()
            raise
        self._closed = False

    @property
    def clock(self) -> Clock:
        """The client's Hybrid Logical Clock."""
        return self._async.clock

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Releases the guards still held (as AsyncClient.close) and stops the
        background thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.stop()

    def lock(
        self,
        key: str,
        *more: str,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
        lock_delay: Duration | None = None,
    ) -> Guard:
        """Acquires the lock as acquire() does; use the guard as a context
        manager to release it at the block's end. With more keys,
        ``client.lock("accounts/1", "accounts/2")`` takes them together, all
        or none, under one lease (see AsyncClient.lock)."""
        return self.acquire(key, *more, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog, lock_delay=lock_delay)

    def acquire(
        self,
        key: str,
        *more: str,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
        lock_delay: Duration | None = None,
    ) -> Guard:
        """Takes the lease on key (and on every key of more, together).
        ``wait=None`` (the default) blocks until it is acquired; ``wait=d``
        for at most d, then raises NotAcquiredError; ``wait=0`` makes exactly
        one attempt. Ctrl-C takes the waiter off the server's queue.
        ``lock_delay`` as AsyncClient.acquire."""

        async def acquire() -> Guard:
            return Guard(
                self._loop,
                await self._async.acquire(
                    key, *more, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog, lock_delay=lock_delay
                ),
            )

        return self._loop.run(acquire())

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
    ) -> LockRequest:
        """A grant of permits (default 1) of the semaphore key, as
        AsyncClient.semaphore: ``with client.semaphore("jobs", 3, permits=2)
        as guard:`` holds it for the block; the request also has
        ``acquire()``, ``try_acquire()`` and ``run_if_free(fn)``. (Unlike
        ``lock()``, which acquires at once, it describes the grant.)"""
        return LockRequest(
            self._loop,
            self._async.semaphore(key, limit, permits=permits, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog),
        )

    def election(
        self, key: str, *, ttl: Duration | None = None, wait: Duration | None = None, holder: str | None = None
    ) -> Election:
        """Campaigns for the leadership of key, as AsyncClient.election:
        ``with client.election("svc/primary").campaign("10.0.0.7:8080") as
        lead:`` leads for the block; ``election.leader()`` and
        ``election.observe()`` read it."""
        return Election(self._loop, self._async.election(key, ttl=ttl, wait=wait, holder=holder))

    def rwlock(self, key: str) -> RWLock:
        """The read-write lock key, as AsyncClient.rwlock: ``with
        client.rwlock("cfg").read() as guard:`` holds a shared grant,
        ``.write()`` an exclusive one."""
        return RWLock(self._loop, self._async.rwlock(key))

    def try_acquire(
        self,
        key: str,
        *more: str,
        ttl: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
        lock_delay: Duration | None = None,
    ) -> Guard | None:
        """Exactly one attempt, never queueing: the guard, or None when the
        key (a key of the set) is held."""

        async def attempt() -> Guard | None:
            got = await self._async.try_acquire(
                key, *more, ttl=ttl, holder=holder, watchdog=watchdog, lock_delay=lock_delay
            )
            return None if got is None else Guard(self._loop, got)

        return self._loop.run(attempt())

    def with_lock(
        self,
        key: Keys,
        fn: Callable[[Guard], T],
        *,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        lock_delay: Duration | None = None,
    ) -> T:
        """Runs fn(guard) under the lock on key (or on every key of a list,
        together), acquired as acquire() does, and releases it afterwards; a
        lease lost during fn raises its LeaseLostError, unless fn raised."""
        with self.acquire(*key_list(key), ttl=ttl, wait=wait, holder=holder, lock_delay=lock_delay) as guard:
            return fn(guard)

    def run_if_free(
        self,
        key: Keys,
        fn: Callable[[Guard], T],
        *,
        ttl: Duration | None = None,
        holder: str | None = None,
        lock_delay: Duration | None = None,
    ) -> RunResult:
        """Skip if held: one attempt at the lock; held, ``fn`` is not called
        and the answer is ``RunResult(ran=False)``. Free, ``fn(guard)`` runs
        under it (watchdog on), the lock is released afterwards and the
        answer is ``RunResult(ran=True, value=<what fn returned>)``. A lease
        lost during fn raises its LeaseLostError, as with_lock does. key may
        be a list of keys, taken together."""
        guard = self.try_acquire(*key_list(key), ttl=ttl, holder=holder, lock_delay=lock_delay)
        if guard is None:
            return RunResult(False)
        with guard:
            value = fn(guard)
        return RunResult(True, value)

    def run_scheduled(
        self,
        key: str,
        *,
        max_runtime: Duration,
        run: Callable[[int, threading.Event], T],
        ttl: Duration | None = None,
        holder: str | None = None,
    ) -> RunResult:
        """A scheduled job that runs on one server at a time
        (docs/recipes/scheduled-jobs.md), as AsyncClient.run_scheduled: held
        elsewhere, ``RunResult(ran=False)`` without calling ``run``.
        Otherwise ``run(fencing_token, stop)`` runs in this thread under a
        lease of ``ttl`` (default 1.5 x max_runtime, longer than
        max_runtime); ``stop`` (a threading.Event) is set when the lease is
        lost or at max_runtime, and the run should return then. Afterwards the
        lease is released: a lost lease raises LeaseLostError, a run that
        returned after max_runtime DeadlineExceededError."""
        limit = _durations.positive("max_runtime", max_runtime)
        lease = 1.5 * limit if ttl is None else _durations.ttl(ttl)
        if lease <= limit:
            raise InvalidArgumentError(
                f"holdfast: ttl: {_durations.fmt(lease)} must be longer than max_runtime {_durations.fmt(limit)}"
            )
        guard = self.try_acquire(key, ttl=lease, holder=holder)
        if guard is None:
            return RunResult(False)
        stop = threading.Event()
        started = time.monotonic()
        timer = threading.Timer(limit, stop.set)
        timer.daemon = True
        timer.start()
        guard.add_lost_callback(lambda _err: stop.set())
        try:
            value = run(guard.fencing_token, stop)
        except BaseException as run_error:
            timer.cancel()
            try:
                guard.unlock()
            except HoldfastError as release_error:
                raise release_error from run_error
            raise
        timer.cancel()
        guard.unlock()
        if time.monotonic() - started > limit:
            raise DeadlineExceededError(
                f"holdfast: run_scheduled {key!r}: the run did not finish within max_runtime {_durations.fmt(limit)}"
            )
        return RunResult(True, value)

    def inspect(self, key: str) -> LockState | None:
        """Who holds key (None when free), without its owner token."""
        return self._loop.run(self._async.inspect(key))

    def inspect_delay(self, key: str) -> Inspection:
        """inspect() that also reports a key nobody holds that is in its
        lock-delay (see AsyncClient.inspect_delay)."""
        return self._loop.run(self._async.inspect_delay(key))

    def list(self, prefix: str = "", *, page_size: int = 0) -> Iterator[LockState]:
        """Every held lock whose key starts with prefix, in key order (all pages)."""

        async def collect() -> list[LockState]:
            return [s async for s in self._async.list(prefix, page_size=page_size)]

        return iter(self._loop.run(collect()))

    def watch(self, *, key: str | None = None, prefix: str | None = None) -> WatchStream:
        """Streams acquisitions, releases and expiries of one key or of every
        key under a prefix (first event "synced"); iterate it, and close it
        (or use it as a context manager) when done."""
        return WatchStream(self._loop, self._async.watch(key=key, prefix=prefix))

    def server_info(self) -> ServerInfo:
        """The server's version and its backend's promises."""
        return self._loop.run(self._async.server_info())


class LockRequest:
    """Returned by Client.semaphore and Client.rwlock(...).read()/write(): a
    grant not taken yet. ``with`` holds it for the block (acquired as
    ``acquire()`` does); ``try_acquire()`` and ``run_if_free(fn)`` make one
    attempt."""

    def __init__(self, loop: _LoopThread, inner: LockContext) -> None:
        self._loop = loop
        self._inner = inner
        self._guard: Guard | None = None

    def acquire(self) -> Guard:
        """Takes it, waiting as ``wait`` says (as Client.acquire)."""

        async def acquire() -> Guard:
            return Guard(self._loop, await self._inner.acquire())

        return self._loop.run(acquire())

    def try_acquire(self) -> Guard | None:
        """Exactly one attempt, never queueing: the guard, or None when the
        key is held (beyond the permits left)."""

        async def attempt() -> Guard | None:
            got = await self._inner.try_acquire()
            return None if got is None else Guard(self._loop, got)

        return self._loop.run(attempt())

    def run_if_free(self, fn: Callable[[Guard], T]) -> RunResult:
        """Skip if held, as Client.run_if_free."""
        guard = self.try_acquire()
        if guard is None:
            return RunResult(False)
        with guard:
            value = fn(guard)
        return RunResult(True, value)

    def __enter__(self) -> Guard:
        self._guard = self.acquire()
        return self._guard

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._guard is not None:
            self._guard.__exit__(exc_type, *exc)


class RWLock:
    """Returned by Client.rwlock: the read-write lock key, whose ``read()``
    is a shared grant and ``write()`` an exclusive one (as AsyncRWLock)."""

    def __init__(self, loop: _LoopThread, inner: AsyncRWLock) -> None:
        self._loop = loop
        self._inner = inner
        self.key: str = inner.key
        """The read-write lock's key."""

    def read(
        self,
        *,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
    ) -> LockRequest:
        """A shared grant: held together with other readers, never with a writer."""
        return LockRequest(self._loop, self._inner.read(ttl=ttl, wait=wait, holder=holder, watchdog=watchdog))

    def write(
        self,
        *,
        ttl: Duration | None = None,
        wait: Duration | None = None,
        holder: str | None = None,
        watchdog: bool = True,
    ) -> LockRequest:
        """An exclusive grant: held by nobody else, reader or writer."""
        return LockRequest(self._loop, self._inner.write(ttl=ttl, wait=wait, holder=holder, watchdog=watchdog))


class _LoopStream(Generic[E]):
    """A blocking iterator over an async generator stepped on the client's loop."""

    def __init__(self, loop: _LoopThread, events: AsyncIterator[E]) -> None:
        self._loop = loop
        self._events = events

    def __iter__(self: S) -> S:
        return self

    def __next__(self) -> E:
        # The async generator is stepped on the loop's thread only.
        async def step() -> E:
            return await self._events.__anext__()

        try:
            return self._loop.run(step())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Ends the stream."""
        aclose = getattr(self._events, "aclose", None)
        if aclose is None:
            return

        async def close() -> None:
            await aclose()

        with contextlib.suppress(RuntimeError):  # the client's loop already stopped
            self._loop.run(close())

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WatchStream(_LoopStream[LockEvent]):
    """A blocking iterator over a watch's LockEvents."""


class ObservationStream(_LoopStream[Observation]):
    """A blocking iterator over an election's Observations (Election.observe)."""


class Election:
    """Returned by Client.election: campaigns for the leadership of one key
    (as AsyncElection)."""

    def __init__(self, loop: _LoopThread, inner: AsyncElection) -> None:
        self._loop = loop
        self._inner = inner
        self.key: str = inner.key
        """The election's key."""

    def campaign(self, value: str) -> Leadership:
        """Blocks until this client leads with value, as
        AsyncElection.campaign; ``with client.election(k).campaign(v) as
        lead:`` resigns at the block's end."""

        async def campaign() -> Leadership:
            return Leadership(self._loop, await self._inner.campaign(value))

        return self._loop.run(campaign())

    def leader(self) -> Leader | None:
        """The current leader, or None when nobody leads."""
        return self._loop.run(self._inner.leader())

    def observe(self) -> ObservationStream:
        """The election's leader and every change of it (as
        AsyncElection.observe); close the stream (or leave its ``with``
        block) to end it."""
        return ObservationStream(self._loop, self._inner.observe())


class Leadership:
    """A won campaign: the blocking view of an AsyncLeadership; ``guard`` is
    its Guard (``lost``, ``done``, ``held``, ``remaining()``)."""

    def __init__(self, loop: _LoopThread, inner: AsyncLeadership) -> None:
        # Made on the loop's thread (Election.campaign), where inner lives.
        self._loop = loop
        self._inner = inner
        self.guard = Guard(loop, inner.guard)
        """The leadership's guard."""
        self.key: str = inner.key
        """The election's key."""

    @property
    def term(self) -> int:
        """The leadership's term (fencing token); raises LeaseLostError once lost."""
        return self.guard.fencing_token

    @property
    def value(self) -> str:
        """The campaign's value, or the last proclaimed."""
        return self._inner.value

    @property
    def held(self) -> bool:
        """Whether this client still leads (by the local expiry too)."""
        return self.guard.held

    def proclaim(self, value: str) -> None:
        """Replaces the leadership's value (as AsyncLeadership.proclaim)."""
        self._loop.run(self._inner.proclaim(value))

    def resign(self) -> None:
        """Gives the leadership up (as AsyncLeadership.resign)."""
        self._loop.run(self._inner.resign())

    def __enter__(self) -> Leadership:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.guard.__exit__(exc_type, *exc)


class Guard:
    """A held lease: the blocking view of an AsyncGuard, whose watchdog runs
    on the client's background thread."""

    def __init__(self, loop: _LoopThread, inner: AsyncGuard) -> None:
        # Made on the loop's thread (Client.acquire), where inner lives.
        self._loop = loop
        self._inner = inner
        self.key = inner.key
        """The locked key (a multi-key lease's first key)."""
        self.keys = inner.keys
        """Every locked key, in the order given to ``lock()``."""
        self.holder = inner.holder
        """The label others see while this guard holds the key."""
        self.kind: Kind = inner.kind
        """What the key is: ``mutex`` (a lock), ``semaphore`` or ``rwlock``."""
        self.limit: int = inner.limit
        """The key's capacity: 1 for a lock, a semaphore's limit, an rwlock's reader capacity."""
        self.permits: int = inner.permits
        """This lease's share of the limit: 1 for a lock and a reader, a
        semaphore grant's permits, the whole limit for a writer."""
        self.mode: Mode = inner.mode
        """``shared`` for an rwlock's reader, ``exclusive`` for everything else."""
        self.lost = threading.Event()
        """Set (from the client's thread) when the lease is lost."""
        self.done = threading.Event()
        """Set when the guard stops holding: lost or released."""
        inner.add_lost_callback(lambda _e: self.lost.set())
        inner._add_done_hook(self.done.set)

    # Reads that may poison the guard (its local-expiry check) run on the
    # client's loop: the guard's state belongs to that thread.

    @property
    def fencing_token(self) -> int:
        """Raises LeaseLostError once lost, LockReleasedError once unlocked."""

        async def get() -> int:
            return self._inner.fencing_token

        return self._loop.run(get())

    def fencing_token_for(self, key: str) -> int:
        """The fencing token of key, one of the guard's keys (as
        AsyncGuard.fencing_token_for)."""

        async def get() -> int:
            return self._inner.fencing_token_for(key)

        return self._loop.run(get())

    @property
    def stamp(self) -> Timestamp:
        """HLC stamp of the acquisition."""
        return self._inner.stamp

    @property
    def held(self) -> bool:
        """Whether the guard still holds its lease (by the local expiry too)."""

        async def get() -> bool:
            return self._inner.held

        return self._loop.run(get())

    @property
    def lost_error(self) -> LeaseLostError | None:
        """The loss, once the lease is lost."""
        return self._inner.lost_error

    @property
    def ttl(self) -> float:
        """The lease's TTL in seconds."""
        return self._inner.ttl

    @property
    def renewals(self) -> int:
        """Number of successful renewals (watchdog and extend())."""
        return self._inner.renewals

    def remaining(self) -> float:
        """Seconds left to the local expiry; 0 once lost or released."""
        return self._inner.remaining()

    def add_lost_callback(self, cb: Callable[[LeaseLostError], None]) -> None:
        """cb(LeaseLostError) runs on the client's background thread when the
        lease is lost (at once if it already was); it must not call the client."""
        self._loop.loop.call_soon_threadsafe(self._inner.add_lost_callback, cb)

    def extend(self, ttl: Duration | None = None) -> None:
        """Renews the lease (as AsyncGuard.extend)."""
        self._loop.run(self._inner.extend(ttl))

    def unlock(self) -> None:
        """Releases the lease; returns only when the server confirmed it.
        Raises LeaseLostError when the lease was lost (never a quiet
        success); a second unlock after a successful one is a no-op."""
        self._loop.run(self._inner.unlock())

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # A loss raises its LeaseLostError, unless the block itself raised.
        self._loop.run(self._inner._exit(exc_type is not None))
