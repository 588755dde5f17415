"""Calls to the server: each attempt bounded by a timeout, transport
failures retried with the backoff within a budget."""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from ._durations import fmt
from ._options import Backoff
from .errors import ClientClosedError, HoldfastError, UnavailableError, from_connect_error, is_retryable
from .lock.v1.lock_connect import LockServiceClient

if sys.version_info >= (3, 11):
    from asyncio import timeout as _timeout
else:
    from async_timeout import timeout as _timeout

T = TypeVar("T")


def new_request_id() -> str:
    """A fresh request id: 128 random bits, base64url (22 characters). One is
    sent with every Acquire, Extend and Release, the same on each retry of
    that one call, so that a retry whose first attempt's answer was lost is
    answered as that attempt was (the same lease, a release confirmed)."""
    return secrets.token_urlsafe(16)


# The shortest attempt worth sending, when a budget is nearly spent: time for
# a connection to be refused or answered on a healthy network.
_MIN_ATTEMPT = 0.05


class Rpc:
    """The LockService stub with the SDK's call discipline.

    Attempts are bounded with asyncio.timeout (async_timeout before 3.11),
    not the runtime's asyncio.wait_for, which on Python 3.10 and 3.11 can
    swallow a cancellation that arrives as the call completes.
    """

    def __init__(
        self, stub: LockServiceClient, *, retry_budget: float, request_timeout: float, backoff: Backoff
    ) -> None:
        self.stub = stub
        self.retry_budget = retry_budget
        self.request_timeout = request_timeout
        self.backoff = backoff
        self.closed = False
        """Set by the client's close: a call failing after it is ClientClosedError."""

    async def attempt(self, what: str, call: Callable[[], Awaitable[T]], timeout: float) -> T:
        """One attempt: its answer, or a HoldfastError (a failed or timed-out
        transport is UnavailableError). Cancelling the caller's task cancels
        the request and raises CancelledError."""
        timeout = max(timeout, _MIN_ATTEMPT)
        try:
            async with _timeout(timeout):
                try:
                    return await call()
                except ConnectError as e:
                    # The runtime turns the task's cancellation into a
                    # canceled ConnectError; the timeout (our own
                    # cancellation) and a caller's cancel both need the
                    # CancelledError itself.
                    if e.code == Code.CANCELED and isinstance(e.__cause__, asyncio.CancelledError):
                        raise e.__cause__ from None
                    raise
        except asyncio.TimeoutError as e:
            self._raise_if_closed(e)
            raise UnavailableError(f"holdfast: {what}: no answer within {fmt(timeout)}") from e
        except HoldfastError as e:
            self._raise_if_closed(e)
            raise
        except Exception as e:
            self._raise_if_closed(e)
            raise from_connect_error(e, what) from e

    def _raise_if_closed(self, err: BaseException) -> None:
        # Closing the client closes its connections under the calls still
        # in flight (a waiting acquire): they end as ClientClosedError.
        if self.closed:
            raise ClientClosedError() from err

    async def call(self, what: str, call: Callable[[], Awaitable[T]], *, deadline: float = 0.0) -> T:
        """``call`` retried while it fails with a retryable error, until the
        retry budget from now (or ``deadline``, a time.monotonic(), when
        given) is spent; each attempt is bounded by the request timeout and
        the time left. The budget spent, the last failure is raised as
        UnavailableError."""
        start = time.monotonic()
        end = deadline if deadline else start + self.retry_budget
        attempt = 0
        while True:
            try:
                return await self.attempt(what, call, min(self.request_timeout, end - time.monotonic()))
            except HoldfastError as err:
                if not is_retryable(err):
                    raise
                await self.pause(what, err, attempt, start, end)
                attempt += 1

    async def pause(self, what: str, err: HoldfastError, attempt: int, start: float, end: float) -> None:
        """Sleeps the backoff before retry number ``attempt``. When the
        pause would reach past ``end``, it sleeps until ``end`` and raises
        the exhausted-budget error instead: every retry keeps its full
        backoff, and the call gives up when its budget ends."""
        if self.closed:
            raise ClientClosedError() from err
        left = end - time.monotonic()
        pause = self.backoff.delay(attempt)
        if pause >= left:
            if left > 0:
                await asyncio.sleep(left)
            raise self.exhausted(what, err, time.monotonic() - start) from err
        await asyncio.sleep(pause)

    @staticmethod
    def exhausted(what: str, last: HoldfastError, spent: float) -> UnavailableError:
        """The error of a call whose retries ran out: unavailable, with the
        last failure's message (and as the cause)."""
        return UnavailableError(
            f"holdfast: {what}: server unavailable, gave up after {fmt(round(spent, 2))}: {last.message}"
        )

    async def close(self) -> None:
        """Closes the stub."""
        await self.stub.close()
