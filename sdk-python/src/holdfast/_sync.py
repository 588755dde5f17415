"""The synchronous client: a thin wrapper that runs an AsyncClient on its own
event loop in a background thread, so that guards keep renewing while the
caller's thread does blocking work."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, Callable, Optional, TypeVar, Union

from .errors import LeaseLostError, NotAcquiredError
from ._async import AsyncClient, AsyncGuard, Protocol
from .hlc import Clock, Timestamp
from .types import LockState, ServerInfo

T = TypeVar("T")


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
        if threading.current_thread() is self.thread:
            raise RuntimeError("holdfast: the synchronous client cannot be called from its own loop thread (a lost callback?)")
        fut: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Client:
    """A blocking holdfast client::

        with Client("http://127.0.0.1:7410") as client:
            with client.lock("jobs/nightly", ttl=30) as guard:
                write(guard.fencing_token)

    It takes the same arguments as AsyncClient. Durations are in seconds.
    """

    def __init__(
        self,
        address: str,
        *,
        protocol: Protocol = "connect",
        holder: Optional[str] = None,
        default_ttl: float = 15.0,
        retry_budget: float = 2.0,
        request_timeout: float = 10.0,
        max_clock_offset: Optional[float] = None,
        clock: Optional[Clock] = None,
    ) -> None:
        self._loop = _LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(
                address,
                protocol=protocol,
                holder=holder,
                default_ttl=default_ttl,
                retry_budget=retry_budget,
                request_timeout=request_timeout,
                max_clock_offset=max_clock_offset,
                clock=clock,
            )

        self._async = self._loop.run(make())
        self._closed = False

    @property
    def clock(self) -> Clock:
        return self._async.clock

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Releases the guards still held and stops the background thread."""
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
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        watchdog: bool = True,
    ) -> Guard:
        """Acquires the lock (raising NotAcquiredError when it stayed held);
        use the guard as a context manager to release it at the block's end."""
        return self.acquire(key, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog)

    def acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        watchdog: bool = True,
    ) -> Guard:
        got = self.try_acquire(key, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog)
        if isinstance(got, Guard):
            return got
        raise NotAcquiredError(key, got)

    def try_acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        watchdog: bool = True,
    ) -> Union[Guard, Optional[LockState]]:
        got = self._loop.run(self._async.try_acquire(key, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog))
        if isinstance(got, AsyncGuard):
            return Guard(self._loop, got)
        return got

    def with_lock(self, key: str, fn: Callable[[Guard], T], *, ttl: Optional[float] = None, wait: float = 0.0) -> T:
        """Runs fn(guard) under the lock and releases it afterwards."""
        with self.acquire(key, ttl=ttl, wait=wait) as guard:
            return fn(guard)

    def inspect(self, key: str) -> Optional[LockState]:
        return self._loop.run(self._async.inspect(key))

    def list(self, prefix: str = "", *, page_size: int = 0) -> Iterator[LockState]:
        async def collect() -> list[LockState]:
            return [s async for s in self._async.list(prefix, page_size=page_size)]

        return iter(self._loop.run(collect()))

    def server_info(self) -> ServerInfo:
        return self._loop.run(self._async.server_info())


class Guard:
    """A held lease (the blocking view of an AsyncGuard); its watchdog runs
    on the client's background thread."""

    def __init__(self, loop: _LoopThread, inner: AsyncGuard) -> None:
        self._loop = loop
        self._inner = inner
        self.key = inner.key
        self.lost = threading.Event()
        """Set (from the client's thread) when the lease is lost."""
        self._loop.loop.call_soon_threadsafe(inner.add_lost_callback, lambda _e: self.lost.set())

    # Reads that may poison the guard (its safe-clock check) run on the
    # client's loop: the guard's state belongs to that thread.

    @property
    def fencing_token(self) -> int:
        """Raises LeaseLostError once lost, LockReleasedError once unlocked."""

        async def get() -> int:
            return self._inner.fencing_token

        return self._loop.run(get())

    @property
    def stamp(self) -> Timestamp:
        return self._inner.stamp

    @property
    def held(self) -> bool:
        async def get() -> bool:
            return self._inner.held

        return self._loop.run(get())

    @property
    def lost_error(self) -> Optional[LeaseLostError]:
        return self._inner.lost_error

    @property
    def renewals(self) -> int:
        return self._inner.renewals

    def remaining(self) -> float:
        return self._inner.remaining()

    def add_lost_callback(self, cb: Callable[[LeaseLostError], None]) -> None:
        """cb runs on the client's background thread; it must not call the client."""
        self._loop.loop.call_soon_threadsafe(self._inner.add_lost_callback, cb)

    def extend(self, ttl: Optional[float] = None) -> None:
        self._loop.run(self._inner.extend(ttl))

    def unlock(self) -> None:
        """Releases the lease; returns only when the server confirmed it.
        Raises LeaseLostError when the lease was lost (never a quiet
        success); a second unlock after a successful one is a no-op."""
        self._loop.run(self._inner.unlock())

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], *exc: object) -> None:
        # A loss raises its LeaseLostError, unless the block itself raised.
        self._loop.run(self._inner._exit(exc_type is not None))
