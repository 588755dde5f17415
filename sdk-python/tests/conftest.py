"""Fixtures for tests against a real `holdfast serve`.

scripts/with-server.sh starts the server and exports HOLDFAST_ADDR (and
HOLDFAST_SERVER_PID). Without it the server tests skip, unless
HOLDFAST_REQUIRE_SERVICES=1 (set by `make test`), in which case they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pyqwest
import pytest

import holdfast
import holdfast.testing
from holdfast._transport import HttpxTransport
from holdfast.lock.v1.lock_connect import LockServiceClient

ADDR = os.environ.get("HOLDFAST_ADDR")
SERVER_PID: int | None = int(os.environ["HOLDFAST_SERVER_PID"]) if os.environ.get("HOLDFAST_SERVER_PID") else None


@pytest.fixture
def addr() -> str:
    if not ADDR:
        msg = "HOLDFAST_ADDR is unset: run the tests through scripts/with-server.sh (make test-sdk-python)"
        if os.environ.get("HOLDFAST_REQUIRE_SERVICES") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return ADDR


@pytest.fixture(scope="session")
def server_binary() -> str:
    """The holdfast binary for tests that start servers of their own."""
    try:
        return holdfast.testing.find_binary()
    except holdfast.testing.ServerStartError as e:
        if os.environ.get("HOLDFAST_REQUIRE_SERVICES") == "1":
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.fixture
async def client(addr: str) -> AsyncIterator[holdfast.AsyncClient]:
    async with holdfast.AsyncClient(addr, holder="py-test-a") as c:
        yield c


@pytest.fixture
async def other(addr: str) -> AsyncIterator[holdfast.AsyncClient]:
    async with holdfast.AsyncClient(addr, holder="py-test-b") as c:
        yield c


def key(name: str) -> str:
    return f"py/{name}/{secrets.token_hex(6)}"


async def eventually(what: str, cond: Callable[[], bool | Awaitable[bool]], timeout: float = 5.0) -> None:
    """Polls cond until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def raw_client(addr: str) -> AsyncIterator[LockServiceClient]:
    """The generated client, without the SDK, for what a test does behind
    the SDK's back (on the SDK's transport: pyqwest's own aborts at exit)."""
    transport = HttpxTransport()
    try:
        yield LockServiceClient(addr, http_client=pyqwest.Client(transport), send_compression=None)
    finally:
        await transport.aclose()


@contextlib.contextmanager
def paused_server(timeout: float = 5.0) -> Iterator[None]:
    """Freezes the server (SIGSTOP) for the block: returns once every one of
    its threads has stopped (a signal is delivered asynchronously; until
    then the server may still answer), and resumes it (SIGCONT) after."""
    if SERVER_PID is None:
        pytest.fail("HOLDFAST_SERVER_PID unset (run through scripts/with-server.sh)")
    os.kill(SERVER_PID, signal.SIGSTOP)
    try:
        try:
            holdfast.testing.await_stopped(SERVER_PID, timeout)
        except TimeoutError as e:
            pytest.fail(str(e))
        yield
    finally:
        os.kill(SERVER_PID, signal.SIGCONT)
