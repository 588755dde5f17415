"""The asyncio client: acquire leases, keep them with a watchdog, fence work
with their tokens."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Generator
from typing import Any, Callable, Literal, Optional, TypeVar, Union

import pyqwest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.protocol import ProtocolType
from google.protobuf import duration_pb2

from .errors import (
    ClientClosedError,
    ClockOffsetError,
    DeadlineExceededError,
    HoldfastError,
    InvalidArgumentError,
    LeaseLostError,
    LeaseLostReason,
    LockReleasedError,
    NotAcquiredError,
    from_connect_error,
    is_retryable,
)
from .hlc import Clock, Timestamp
from .lock.v1 import lock_pb2
from .lock.v1.lock_connect import LockServiceClient
from ._transport import HttpxTransport
from .types import BackendInfo, EventType, LockEvent, LockState, ServerInfo

if sys.version_info >= (3, 11):
    from asyncio import timeout as _timeout
else:
    from async_timeout import timeout as _timeout

T = TypeVar("T")

DEFAULT_TTL = 15.0
DEFAULT_RETRY_BUDGET = 2.0
DEFAULT_REQUEST_TIMEOUT = 10.0

Protocol = Literal["connect", "grpc-web"]
_PROTOCOLS = {"connect": ProtocolType.CONNECT, "grpc-web": ProtocolType.GRPC_WEB}

_EVENT_TYPES: dict[int, EventType] = {
    lock_pb2.EVENT_TYPE_SYNCED: "synced",
    lock_pb2.EVENT_TYPE_ACQUIRED: "acquired",
    lock_pb2.EVENT_TYPE_RELEASED: "released",
    lock_pb2.EVENT_TYPE_EXPIRED: "expired",
}


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def _seconds(d: duration_pb2.Duration) -> float:
    return float(d.ToNanoseconds()) / 1e9


def _check_seconds(field: str, v: float, minimum: float) -> None:
    if not isinstance(v, (int, float)) or v != v or v < minimum or v == float("inf"):
        raise InvalidArgumentError(f"holdfast: {field}: {v!r} must be a finite number of seconds >= {minimum}")


def _backoff(attempt: int, base: float = 0.05, cap: float = 1.0) -> float:
    """Exponential backoff with jitter: attempt 0 waits about base seconds."""
    ceiling: float = min(cap, base * float(2 ** min(attempt, 16)))
    return ceiling / 2 + random.random() * ceiling / 2


def _timeout_ms(seconds: float) -> int:
    return max(1, int(seconds * 1000 + 0.999))


def _default_holder() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


class AsyncClient:
    """A holdfast client for asyncio. Create one per process and share it::

        async with AsyncClient("http://127.0.0.1:7410") as client:
            async with client.lock("jobs/nightly", ttl=30) as guard:
                write(guard.fencing_token)

    Durations are in seconds.
    """

    def __init__(
        self,
        address: str,
        *,
        protocol: Protocol = "connect",
        holder: Optional[str] = None,
        default_ttl: float = DEFAULT_TTL,
        retry_budget: float = DEFAULT_RETRY_BUDGET,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_clock_offset: Optional[float] = None,
        clock: Optional[Clock] = None,
        interceptors: tuple[Any, ...] = (),
    ) -> None:
        """
        Args:
            address: base URL of the server, e.g. ``http://127.0.0.1:7410``.
            protocol: ``connect`` (default) or ``grpc-web`` (gRPC needs HTTP/2
                trailers, which the HTTP stack does not read; the server
                answers all three on one port).
            holder: label shown to others while this client holds a lock.
            default_ttl: lease length when a call gives none.
            retry_budget: how long calls other than acquire retry on
                ``unavailable`` (acquire retries within its own wait).
            request_timeout: per-request timeout (added to acquire's wait).
            max_clock_offset: server stamps further ahead are not merged
                (default 0.5 s). Ignored when clock is given.
            clock: the HLC to tick and merge into (default: a new one).
            interceptors: connectrpc client interceptors.
        """
        if protocol not in _PROTOCOLS:
            raise InvalidArgumentError(f"holdfast: protocol {protocol!r}: use one of {sorted(_PROTOCOLS)}")
        self._transport = HttpxTransport()
        self._rpc = _BoundedStub(
            LockServiceClient(
                address.rstrip("/"),
                protocol=_PROTOCOLS[protocol],
                send_compression=None,
                accept_compression=(),
                interceptors=interceptors,
                http_client=pyqwest.Client(self._transport),
            )
        )
        self.clock = clock or Clock(max_offset=0.5 if max_clock_offset is None else max_clock_offset)
        """The client's Hybrid Logical Clock: ticked for every request, merged with every server stamp."""
        self._holder = holder or _default_holder()
        self._default_ttl = default_ttl
        self._retry_budget = retry_budget
        self._request_timeout = request_timeout
        self._guards: set[AsyncGuard] = set()
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Releases the guards still held (retrying ``unavailable`` within the
        retry budget), stops their watchdogs and closes the connection. A
        guard whose release was not confirmed ends lost with reason
        ``client_closed``; its ``unlock()`` then raises that LeaseLostError.
        Further calls raise ClientClosedError."""
        if self._closed:
            return
        self._closed = True
        guards = list(self._guards)
        await asyncio.gather(*(g._close_for_client(self._retry_budget) for g in guards))
        await self._rpc.close()
        await self._transport.aclose()

    def lock(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        watchdog: bool = True,
    ) -> LockContext:
        """A lock on key: ``async with client.lock(k, ttl=10) as guard:`` holds
        it for the block and releases it afterwards; ``guard = await
        client.lock(k)`` just acquires. Raises NotAcquiredError when the key
        stayed held for the whole wait (0: try once)."""
        return LockContext(self, key, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog)

    async def acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        watchdog: bool = True,
    ) -> AsyncGuard:
        """Takes the lease on key, queueing on the server for up to wait
        seconds. Raises NotAcquiredError when the key stayed held."""
        got = await self.try_acquire(key, ttl=ttl, wait=wait, holder=holder, watchdog=watchdog)
        if isinstance(got, AsyncGuard):
            return got
        raise NotAcquiredError(key, got)

    async def try_acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        holder: Optional[str] = None,
        watchdog: bool = True,
    ) -> Union[AsyncGuard, Optional[LockState]]:
        """Like acquire, but contention is an answer: returns the guard, or
        the holder's LockState (None if the server did not say)."""
        self._check_open()
        ttl = self._default_ttl if ttl is None else ttl
        _check_seconds("ttl", ttl, 1e-3)
        _check_seconds("wait", wait, 0)
        deadline = time.monotonic() + wait
        attempt = 0
        while True:
            sent_at = time.monotonic()
            remaining = max(0.0, deadline - sent_at)
            req = lock_pb2.AcquireRequest(
                key=key,
                ttl=_duration(ttl),
                holder=holder if holder is not None else self._holder,
                client_stamp=self.clock.now().to_proto(),
            )
            if remaining > 0:
                req.wait.CopyFrom(_duration(remaining))
            try:
                res = await self._rpc.acquire(req, timeout_ms=_timeout_ms(remaining + self._request_timeout))
            except Exception as e:  # noqa: BLE001 - mapped below
                _reraise_cancellation(e)
                err = from_connect_error(e, f"acquire {key!r}")
                # A failed acquire has an unknown outcome; if the server did
                # grant it, nobody renews that lease and it expires.
                pause = _backoff(attempt)
                attempt += 1
                if is_retryable(err) and time.monotonic() + pause < deadline:
                    await asyncio.sleep(pause)
                    continue
                raise err from e
            self._merge(res.server_stamp if res.HasField("server_stamp") else None)
            if not res.acquired or not res.HasField("lease"):
                return LockState.from_proto(res.current) if res.HasField("current") else None
            self._merge(res.lease.stamp if res.lease.HasField("stamp") else None)
            valid_from = await self._confirm(res.lease, sent_at)
            if valid_from is None:
                return None
            return AsyncGuard(self, res.lease, valid_from, watchdog)

    async def _confirm(self, lease: lock_pb2.Lease, sent_at: float) -> Optional[float]:
        """A lease whose Acquire answer came late (after a server-side wait)
        started on the server somewhere between sent_at and now: counting
        from sent_at, little or none of it may be left. One Extend sent now
        establishes a fresh local expiry. Returns the moment the lease is
        valid from, or None when it was lost before use."""
        ttl = _seconds(lease.ttl)
        if time.monotonic() - sent_at < ttl / 3:
            return sent_at
        now = time.monotonic()
        try:
            res = await self._rpc.extend(
                lock_pb2.ExtendRequest(
                    key=lease.key, owner_token=lease.owner_token, ttl=lease.ttl, client_stamp=self.clock.now().to_proto()
                ),
                timeout_ms=_timeout_ms(self._request_timeout),
            )
        except Exception as e:  # noqa: BLE001
            _reraise_cancellation(e)
            # Still valid on the safe clock: hand it out, the watchdog renews at once.
            if time.monotonic() < sent_at + ttl:
                return sent_at
            raise from_connect_error(e, f"acquire {lease.key!r}") from e
        self._merge(res.server_stamp)
        if not res.extended:
            return None
        self._merge(res.lease.stamp if res.lease.HasField("stamp") else None)
        return now

    async def inspect(self, key: str) -> Optional[LockState]:
        """Who holds key (None when free), without its owner token."""
        self._check_open()
        res = await self._retrying(f"inspect {key!r}", lambda t: self._rpc.inspect(lock_pb2.InspectRequest(key=key), timeout_ms=t))
        self._merge(res.server_stamp)
        return LockState.from_proto(res.state) if res.held else None

    async def list(self, prefix: str = "", *, page_size: int = 0) -> AsyncIterator[LockState]:
        """Every held lock whose key starts with prefix, in key order."""
        self._check_open()
        token = ""
        while True:
            req = lock_pb2.ListRequest(prefix=prefix, page_size=page_size, page_token=token)
            res = await self._retrying(f"list {prefix!r}", lambda t: self._rpc.list(req, timeout_ms=t))
            self._merge(res.server_stamp)
            for s in res.locks:
                yield LockState.from_proto(s)
            token = res.next_page_token
            if not token:
                return

    async def watch(self, *, key: Optional[str] = None, prefix: Optional[str] = None) -> AsyncIterator[LockEvent]:
        """Streams acquisitions, releases and expiries of one key or of every
        key under a prefix. The first event is "synced"."""
        self._check_open()
        if (key is None) == (prefix is None):
            raise InvalidArgumentError("holdfast: watch: give exactly one of key and prefix")
        req = lock_pb2.WatchRequest(key=key) if key is not None else lock_pb2.WatchRequest(prefix=prefix or "")
        try:
            async for ev in self._rpc.watch(req):
                self._merge(ev.server_stamp)
                yield LockEvent(
                    type=_EVENT_TYPES.get(ev.type, "synced"),
                    state=LockState.from_proto(ev.state) if ev.HasField("state") else None,
                    stamp=Timestamp.from_proto(ev.server_stamp),
                )
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except ConnectError as e:
            if e.code == Code.CANCELED:
                # connectrpc reports the cancellation of the caller's task as
                # a canceled error; give the task its CancelledError back.
                raise asyncio.CancelledError() from e
            raise from_connect_error(e, "watch") from e
        except Exception as e:  # noqa: BLE001
            _reraise_cancellation(e)
            raise from_connect_error(e, "watch") from e

    async def server_info(self) -> ServerInfo:
        """The server's version and its backend's promises."""
        self._check_open()
        res = await self._retrying("server info", lambda t: self._rpc.get_server_info(lock_pb2.GetServerInfoRequest(), timeout_ms=t))
        self._merge(res.server_stamp)
        b = res.backend
        return ServerInfo(
            version=res.version,
            backend=BackendInfo(
                name=b.name,
                version=b.version,
                shared=b.shared,
                durable=b.durable,
                ttl_granularity=_seconds(b.ttl_granularity),
                min_ttl=_seconds(b.min_ttl),
                max_ttl=_seconds(b.max_ttl),
                fair=b.fair,
            ),
            max_clock_offset=_seconds(res.max_clock_offset),
            stamp=Timestamp.from_proto(res.server_stamp),
        )

    # ---- internals shared with AsyncGuard ----

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError()

    def _merge(self, p: Optional[lock_pb2.HlcTimestamp]) -> None:
        """Merges a server stamp. One further ahead than the max offset is not
        merged: adopting it would make this client's next stamps look too far
        ahead to every other server."""
        ts = Timestamp.from_proto(p)
        if ts.is_zero():
            return
        try:
            self.clock.update(ts)
        except ClockOffsetError:
            pass

    async def _retrying(
        self,
        what: str,
        call: Callable[[int], Awaitable[T]],
        budget: Optional[float] = None,
    ) -> T:
        """Runs call(timeout_ms), retrying on unavailable within the budget."""
        deadline = time.monotonic() + (self._retry_budget if budget is None else budget)
        attempt = 0
        while True:
            try:
                return await call(_timeout_ms(self._request_timeout))
            except Exception as e:  # noqa: BLE001
                _reraise_cancellation(e)
                err = from_connect_error(e, what)
                pause = _backoff(attempt)
                attempt += 1
                if is_retryable(err) and time.monotonic() + pause < deadline:
                    await asyncio.sleep(pause)
                    continue
                raise err from e


class _BoundedStub:
    """The generated stub with each call bounded by our own timeout.

    connectrpc bounds a unary call with asyncio.wait_for, which on Python
    3.10 and 3.11 swallows a cancellation that arrives as the call completes:
    a watchdog cancelled at that moment would renew on forever, and
    asyncio.run would wait for it at exit. asyncio.timeout (async_timeout
    before 3.11) does not lose it."""

    def __init__(self, stub: LockServiceClient) -> None:
        self._stub = stub

    async def acquire(self, req: lock_pb2.AcquireRequest, *, timeout_ms: int) -> lock_pb2.AcquireResponse:
        return await _bounded(self._stub.acquire(req), timeout_ms)

    async def extend(self, req: lock_pb2.ExtendRequest, *, timeout_ms: int) -> lock_pb2.ExtendResponse:
        return await _bounded(self._stub.extend(req), timeout_ms)

    async def release(self, req: lock_pb2.ReleaseRequest, *, timeout_ms: int) -> lock_pb2.ReleaseResponse:
        return await _bounded(self._stub.release(req), timeout_ms)

    async def inspect(self, req: lock_pb2.InspectRequest, *, timeout_ms: int) -> lock_pb2.InspectResponse:
        return await _bounded(self._stub.inspect(req), timeout_ms)

    async def list(self, req: lock_pb2.ListRequest, *, timeout_ms: int) -> lock_pb2.ListResponse:
        return await _bounded(self._stub.list(req), timeout_ms)

    async def get_server_info(self, req: lock_pb2.GetServerInfoRequest, *, timeout_ms: int) -> lock_pb2.GetServerInfoResponse:
        return await _bounded(self._stub.get_server_info(req), timeout_ms)

    def watch(self, req: lock_pb2.WatchRequest) -> AsyncIterator[lock_pb2.WatchEvent]:
        return self._stub.watch(req)

    async def close(self) -> None:
        await self._stub.close()


async def _bounded(call: Awaitable[T], timeout_ms: int) -> T:
    try:
        async with _timeout(timeout_ms / 1000):
            try:
                return await call
            except ConnectError as e:
                # connectrpc turns the task's cancellation into a canceled
                # ConnectError; the timeout (our own cancellation) and a
                # caller's cancel both need the CancelledError itself.
                if e.code == Code.CANCELED and isinstance(e.__cause__, asyncio.CancelledError):
                    raise e.__cause__ from None
                raise
    except asyncio.TimeoutError as e:
        raise ConnectError(Code.DEADLINE_EXCEEDED, f"no answer within {timeout_ms} ms") from e


class LockContext:
    """Returned by AsyncClient.lock: an async context manager that holds the
    lock for its block, or an awaitable that just acquires it."""

    def __init__(self, client: AsyncClient, key: str, **opts: Any) -> None:
        self._client = client
        self._key = key
        self._opts = opts
        self._guard: Optional[AsyncGuard] = None

    def __await__(self) -> Generator[Any, None, AsyncGuard]:
        return self._client.acquire(self._key, **self._opts).__await__()

    async def __aenter__(self) -> AsyncGuard:
        self._guard = await self._client.acquire(self._key, **self._opts)
        return self._guard

    async def __aexit__(self, exc_type: Optional[type[BaseException]], *exc: object) -> None:
        if self._guard is not None:
            await self._guard._exit(exc_type is not None)


LostCallback = Callable[[LeaseLostError], None]


class AsyncGuard:
    """A held lease.

    Its watchdog renews it at about TTL/3. The guard is poisoned when a
    renewal answers extended=false, or when no renewal has succeeded by the
    lease's expiry measured on this process's monotonic clock from the moment
    the last successful renewal (or the acquire) was sent. Poisoned, its
    ``lost`` event is set, its callbacks run, and ``fencing_token`` raises
    LeaseLostError. Nothing is raised at the caller asynchronously.
    """

    def __init__(self, client: AsyncClient, lease: lock_pb2.Lease, sent_at: float, watchdog: bool) -> None:
        self._client = client
        self.key: str = lease.key
        self._owner_token = lease.owner_token
        self._fencing_token: int = lease.fencing_token
        self._stamp = Timestamp.from_proto(lease.stamp if lease.HasField("stamp") else None)
        self._ttl = _seconds(lease.ttl)
        self._valid_from = sent_at
        self._state: Literal["held", "lost", "released"] = "held"
        self._lost_error: Optional[LeaseLostError] = None
        self._callbacks: list[LostCallback] = []
        self._renewals = 0
        self._last_err: Optional[HoldfastError] = None
        self._unlock_lock = asyncio.Lock()  # serialises unlock() and close
        self._tidied = False  # the best-effort release after an "expired" loss was sent
        self.lost = asyncio.Event()
        """Set when the lease is lost (not when it is released by unlock)."""
        self.done = asyncio.Event()
        """Set when the guard stops holding: lost or released."""
        loop = asyncio.get_running_loop()
        self._expiry: Optional[asyncio.TimerHandle] = None
        self._arm_expiry(loop)
        client._guards.add(self)
        # Set before the watchdog task is cancelled: a cancellation that lands
        # inside an RPC can surface as a transport error rather than
        # CancelledError, and the retry loop must not take it for a
        # transient failure and carry on (unlock would wait for it forever).
        self._stopping = False
        self._task: Optional[asyncio.Task[None]] = loop.create_task(self._watchdog()) if watchdog else None

    # ---- public surface ----

    @property
    def fencing_token(self) -> int:
        """The fencing token of this lease, larger than every earlier holder's.

        Raises LeaseLostError once the lease is lost and LockReleasedError
        once it was unlocked."""
        self._raise_if_not_held()
        return self._fencing_token

    @property
    def stamp(self) -> Timestamp:
        """HLC stamp of the acquisition."""
        return self._stamp

    @property
    def held(self) -> bool:
        self._check_expiry()
        return self._state == "held"

    @property
    def lost_error(self) -> Optional[LeaseLostError]:
        return self._lost_error

    @property
    def ttl(self) -> float:
        return self._ttl

    @property
    def renewals(self) -> int:
        """Number of successful renewals (watchdog and extend())."""
        return self._renewals

    def remaining(self) -> float:
        """Seconds left on the lease by the client's monotonic clock."""
        if self._state != "held":
            return 0.0
        return max(0.0, self._valid_from + self._ttl - time.monotonic())

    def add_lost_callback(self, cb: LostCallback) -> None:
        """Calls cb(LeaseLostError) when the lease is lost (at once if it
        already was). Runs on the event loop; exceptions are swallowed."""
        if self._lost_error is not None:
            self._call(cb, self._lost_error)
        elif self._state == "held":
            self._callbacks.append(cb)

    async def extend(self, ttl: Optional[float] = None) -> None:
        """Renews the lease for ttl seconds (default: its current TTL) from
        now, retrying ``unavailable`` within the lease's remaining time.
        Raises LeaseLostError once the lease is lost, poisoning the guard
        (reason ``rejected``) when the server answers extended=false, and
        LockReleasedError after unlock(). A transport error leaves the guard
        holding until its local expiry."""
        self._raise_if_not_held()
        ttl = self._ttl if ttl is None else ttl
        _check_seconds("ttl", ttl, 1e-3)
        sent_at = time.monotonic()
        budget = max(0.0, self._expires_at() - sent_at)
        try:
            ok = await self._client._retrying(
                f"extend {self.key!r}", lambda t: self._extend_once(ttl, sent_at, t), budget
            )
        except HoldfastError:
            self._raise_if_not_held()
            raise
        if not ok:
            self._raise_if_not_held()
            # Not reached: _extend_once answers False only after the guard ended.
            raise LeaseLostError(self.key, "rejected", self._fencing_token)

    async def unlock(self) -> None:
        """Stops the watchdog and releases the lease.

        Returns only when the server confirmed the release. When the lease
        was already lost, or the server answers released=false, it raises
        the LeaseLostError (reason ``rejected``, ``expired``,
        ``client_closed`` or ``release_unconfirmed``): never a quiet success
        (etcd#22082). ``unavailable`` and timeouts are retried with backoff
        until the lease's local expiry (after which the server frees the key
        by itself and unlock raises the loss, reason ``expired``). unlock()
        after a successful unlock() is a no-op; after one that failed for
        another reason (a non-retryable error) it may be called again."""
        async with self._unlock_lock:
            await self._stop_watchdog()
            self._check_expiry()
            if self._state == "released":
                return
            if self._lost_error is not None:
                await self._release_after_loss()
                raise self._lost_error
            await self._release(self._expires_at())

    async def __aenter__(self) -> AsyncGuard:
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]], *exc: object) -> None:
        await self._exit(exc_type is not None)

    # ---- internals ----

    async def _exit(self, failed: bool) -> None:
        """The end of an ``async with`` block: unlock. A loss raises its
        LeaseLostError, unless the block itself raised (its exception is the
        story; the release is still attempted)."""
        if not failed:
            await self.unlock()
            return
        try:
            await self.unlock()
        except HoldfastError:
            pass

    async def _close_for_client(self, budget: float) -> None:
        """AsyncClient.close: release if still held; a guard not released
        ends lost with reason ``client_closed``."""
        async with self._unlock_lock:
            await self._stop_watchdog()
            self._check_expiry()
            if self._state != "held":
                return
            try:
                await self._release(min(self._expires_at(), time.monotonic() + budget))
            except HoldfastError:
                pass  # the loss below says it; the lease expires on the server
            self._poison("client_closed")

    async def _stop_watchdog(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not _current_task():
            self._stopping = True
            task.cancel()
            # wait (not await task): our own cancellation still propagates.
            await asyncio.wait([task])

    def _expires_at(self) -> float:
        return self._valid_from + self._ttl

    async def _release(self, deadline: float) -> None:
        """Sends Release until the server answers, the deadline passes, or
        the lease's local expiry passes (a release after it is moot: the key
        frees itself). Returns once released; raises the LeaseLostError, or
        a non-retryable error (the guard then still holds until expiry)."""
        # in_doubt: an earlier attempt failed in transit and may have reached
        # the server; a later released=false then does not prove a loss.
        in_doubt = False
        attempt = 0
        while True:
            self._raise_if_not_held()
            left = min(deadline, self._expires_at()) - time.monotonic()
            req = lock_pb2.ReleaseRequest(
                key=self.key, owner_token=self._owner_token, client_stamp=self._client.clock.now().to_proto()
            )
            try:
                res = await self._client._rpc.release(
                    req, timeout_ms=_timeout_ms(max(0.0, min(left, self._client._request_timeout)))
                )
            except Exception as e:  # noqa: BLE001 - mapped below
                _reraise_cancellation(e)
                err = from_connect_error(e, f"release {self.key!r}")
                if not (is_retryable(err) or isinstance(err, DeadlineExceededError)):
                    raise err from e
                in_doubt = True
                self._last_err = err
                pause = min(_backoff(attempt), min(deadline, self._expires_at()) - time.monotonic())
                attempt += 1
                if pause <= 0:
                    self._raise_if_not_held()  # past the local expiry: "expired"
                    raise err from e  # the caller's deadline (close's budget) ran out first
                await asyncio.sleep(pause)
                continue
            self._client._merge(res.server_stamp)
            if res.released:
                self._finish("released", None)
                # Released, but too late: the guard was already lost on the
                # safe clock (the work may have stopped); that loss stands.
                if self._lost_error is not None:
                    raise self._lost_error
                return
            self._poison("release_unconfirmed" if in_doubt else "rejected")
            self._raise_if_not_held()
            return

    async def _release_after_loss(self) -> None:
        """After a loss the server did not confirm (``expired``), the lease
        may still be held on the server: one best-effort release frees the
        key before its TTL. Compare-on-release makes it harmless if a
        successor holds it."""
        if self._tidied or self._lost_error is None or self._lost_error.reason != "expired":
            return
        self._tidied = True
        try:
            res = await self._client._rpc.release(
                lock_pb2.ReleaseRequest(
                    key=self.key, owner_token=self._owner_token, client_stamp=self._client.clock.now().to_proto()
                ),
                timeout_ms=_timeout_ms(min(self._ttl, self._client._request_timeout)),
            )
            self._client._merge(res.server_stamp)
        except Exception:  # noqa: BLE001 - best effort: the lease expires by itself
            pass

    async def _extend_once(self, ttl: float, sent_at: float, timeout_ms: int) -> bool:
        res = await self._client._rpc.extend(
            lock_pb2.ExtendRequest(
                key=self.key,
                owner_token=self._owner_token,
                ttl=_duration(ttl),
                client_stamp=self._client.clock.now().to_proto(),
            ),
            timeout_ms=timeout_ms,
        )
        self._client._merge(res.server_stamp)
        if self._state != "held":
            return False
        if not res.extended:
            self._poison("rejected")
            return False
        if time.monotonic() >= self._expires_at():
            # The answer came after the local expiry: the guard was already
            # lost on the safe clock and the work may have stopped.
            self._poison("expired")
            return False
        self._client._merge(res.lease.stamp if res.lease.HasField("stamp") else None)
        # The renewal counts from when it was sent, never from when it
        # answered: the server may have started the new TTL any time after.
        self._valid_from = max(self._valid_from, sent_at)
        self._ttl = _seconds(res.lease.ttl) if res.HasField("lease") and res.lease.HasField("ttl") else ttl
        self._last_err = None
        self._renewals += 1
        self._arm_expiry(asyncio.get_running_loop())
        return True

    async def _watchdog(self) -> None:
        try:
            while self._state == "held" and not self._stopping:
                # Renew a third of the TTL after the last successful renewal was sent.
                await asyncio.sleep(max(0.0, self._valid_from + self._ttl / 3 - time.monotonic()))
                attempt = 0
                while self._state == "held" and not self._stopping:
                    sent_at = time.monotonic()
                    remaining = self._valid_from + self._ttl - sent_at
                    if remaining <= 0:
                        self._poison("expired")
                        return
                    try:
                        # An answer after the lease's expiry is useless: cap
                        # each attempt at the time left, and at a third of the
                        # TTL so a hung connection leaves time for another.
                        await self._extend_once(self._ttl, sent_at, _timeout_ms(min(remaining, self._ttl / 3)))
                        break
                    except Exception as e:  # noqa: BLE001
                        _reraise_cancellation(e)
                        if self._state != "held" or self._stopping:
                            return
                        # Any error short of the server's extended=false must
                        # not drop a lease that is still valid (consul#912):
                        # retry until it runs out (the expiry timer poisons
                        # the guard then, "expired", with this error as the
                        # cause), as the Go SDK does.
                        self._last_err = from_connect_error(e, f"renew {self.key!r}")
                        pause = min(
                            _backoff(attempt, 0.05, max(0.05, self._ttl / 10)),
                            max(0.0, self._valid_from + self._ttl - time.monotonic()),
                        )
                        attempt += 1
                        await asyncio.sleep(pause)
        except asyncio.CancelledError:
            pass

    def _arm_expiry(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        # loop.time() is time.monotonic() on every standard event loop.
        delay = self._valid_from + self._ttl - time.monotonic()
        self._expiry = loop.call_later(max(0.0, delay), self._on_expiry, loop)

    def _on_expiry(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._state != "held":
            return
        if time.monotonic() >= self._valid_from + self._ttl:
            self._poison("expired")
        else:  # a renewal landed while the timer was queued
            self._arm_expiry(loop)

    def _poison(self, reason: LeaseLostReason) -> None:
        if self._state != "held":
            return
        err = LeaseLostError(self.key, reason, self._fencing_token)
        if reason == "expired" and self._last_err is not None:
            err.__cause__ = self._last_err  # the renewal trouble that let it run out
        self._lost_error = err
        self._finish("lost", err)

    def _finish(self, state: Literal["lost", "released"], err: Optional[LeaseLostError]) -> None:
        if self._state != "held":
            return  # the first end wins
        self._state = state
        if self._expiry is not None:
            self._expiry.cancel()
        task, self._task = self._task, None
        if task is not None and task is not _current_task():
            self._stopping = True
            task.cancel()
        self._client._guards.discard(self)
        self.done.set()
        if err is not None:
            self.lost.set()
            callbacks, self._callbacks = self._callbacks, []
            for cb in callbacks:
                self._call(cb, err)

    @staticmethod
    def _call(cb: LostCallback, err: LeaseLostError) -> None:
        try:
            cb(err)
        except Exception:  # noqa: BLE001 - a callback must not break the watchdog
            pass

    def _check_expiry(self) -> None:
        # The expiry timer may not have run yet (a busy event loop): the
        # safe clock decides, not the timer.
        if self._state == "held" and time.monotonic() >= self._valid_from + self._ttl:
            self._poison("expired")

    def _raise_if_not_held(self) -> None:
        self._check_expiry()
        if self._state == "held":
            return
        if self._lost_error is not None:
            raise self._lost_error
        raise LockReleasedError(self.key)


def _reraise_cancellation(err: BaseException) -> None:
    """connectrpc reports the cancellation of the task running a call as a
    ``canceled`` ConnectError; give the task its CancelledError back, so
    that cancelling a call (or asyncio.run ending a watchdog) is never taken
    for a failed attempt and retried."""
    if isinstance(err, ConnectError) and err.code == Code.CANCELED and isinstance(err.__cause__, asyncio.CancelledError):
        raise asyncio.CancelledError() from err


def _current_task() -> Optional[asyncio.Task[Any]]:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None
