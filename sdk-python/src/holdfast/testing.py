"""A real holdfast server for your tests: the pytest fixture
``holdfast_server``, registered by the package (entry point ``pytest11``),
so any test can ask for it::

    async def test_my_job(holdfast_server):
        async with holdfast.AsyncClient(holdfast_server.address) as client:
            ...

It runs the ``holdfast`` binary (``holdfast serve`` on the embedded memory
backend) on a free loopback port, once per test session, and stops it by its
PID afterwards. The binary is ``$HOLDFAST_BIN`` if set, else ``holdfast`` in
``$HOLDFAST_BIN_DIR``, else ``holdfast`` on PATH (``go install
github.com/holdfast/holdfast/server/cmd/holdfast@latest`` puts it there).
Keys are shared across the session: give each test keys of its own.
``server.pause()`` and ``server.resume()`` freeze and thaw the server
(SIGSTOP/SIGCONT), to test what your code does when its lease cannot be
renewed. ``run_server(*flags)`` starts one with flags of your own.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import pytest

READY_PREFIX = "holdfast serving addr="


class ServerStartError(RuntimeError):
    """The holdfast binary is missing or did not become ready."""


@dataclass
class HoldfastServer:
    """A running ``holdfast serve``."""

    address: str
    """Its base URL, ``http://127.0.0.1:PORT``: pass it to AsyncClient or Client."""
    process: subprocess.Popen[str] = field(repr=False)

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def pause(self) -> None:
        """Freezes the server (SIGSTOP): it answers nothing until resume().
        Returns once every thread of it has stopped: a signal is delivered
        asynchronously, and until then the server may still answer."""
        os.kill(self.pid, signal.SIGSTOP)
        await_stopped(self.pid)

    def resume(self) -> None:
        """Thaws a paused server (SIGCONT)."""
        os.kill(self.pid, signal.SIGCONT)

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the server (SIGTERM, then SIGKILL after timeout) and reaps it."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)  # a paused server must see the TERM
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def find_binary() -> str:
    """The holdfast binary to run: $HOLDFAST_BIN, $HOLDFAST_BIN_DIR/holdfast
    or holdfast on PATH."""
    if os.environ.get("HOLDFAST_BIN"):
        return os.environ["HOLDFAST_BIN"]
    if os.environ.get("HOLDFAST_BIN_DIR"):
        return os.path.join(os.environ["HOLDFAST_BIN_DIR"], "holdfast")
    found = shutil.which("holdfast")
    if found is None:
        raise ServerStartError(
            "holdfast.testing: no holdfast binary: set HOLDFAST_BIN, or put holdfast on PATH "
            "(go install github.com/holdfast/holdfast/server/cmd/holdfast@latest)"
        )
    return found


@contextlib.contextmanager
def run_server(*flags: str, binary: str | None = None, ready_timeout: float = 60.0) -> Iterator[HoldfastServer]:
    """Runs ``holdfast serve --addr 127.0.0.1:0 FLAGS...`` until the block ends.

    Waits for the server's readiness line on stdout; its logs go to a
    temporary file, whose end is in the error when it does not start. With
    ``--tls-cert`` among the flags the address is ``https://``."""
    exe = binary or find_binary()
    scheme = "https" if any(f == "--tls-cert" or f.startswith("--tls-cert=") for f in flags) else "http"
    with tempfile.TemporaryFile(mode="w+", prefix="holdfast-server-", suffix=".log") as log:
        try:
            proc = subprocess.Popen(
                [exe, "serve", "--addr", "127.0.0.1:0", *flags],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        except OSError as e:
            raise ServerStartError(f"holdfast.testing: cannot run {exe}: {e}") from e
        server = HoldfastServer(address="", process=proc)
        try:
            server.address = f"{scheme}://" + _await_ready(proc, ready_timeout, log)
            yield server
        finally:
            server.stop()


def _await_ready(proc: subprocess.Popen[str], timeout: float, log: IO[str]) -> str:
    """Reads stdout until the readiness line; returns its host:port. The rest
    of stdout is drained on a daemon thread so the server never blocks on it."""
    assert proc.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    stdout = proc.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="holdfast-server-stdout", daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=timeout)
            if line is None:
                raise ServerStartError(
                    f"holdfast.testing: the server exited ({proc.wait()}) before it was ready{_tail(log)}"
                )
            if line.startswith(READY_PREFIX):
                return line[len(READY_PREFIX) :].split()[0]
    except queue.Empty:
        raise ServerStartError(f"holdfast.testing: no readiness line within {timeout:g}s{_tail(log)}") from None


def _tail(log: IO[str]) -> str:
    try:
        log.seek(0)
        text = log.read()
    except (OSError, ValueError):
        return ""
    return "; its log ends:\n" + text[-2000:] if text else ""


@pytest.fixture(scope="session")
def holdfast_server() -> Iterator[HoldfastServer]:
    """A ``holdfast serve`` on a free loopback port for the test session."""
    try:
        with run_server() as server:
            yield server
    except ServerStartError as e:
        pytest.fail(str(e), pytrace=False)


def _all_threads_stopped(pid: int) -> bool:
    try:
        states = []
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                # The state follows the command name, which is in parentheses.
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except FileNotFoundError:
        return False
    return all(s in ("T", "t") for s in states)


def await_stopped(pid: int, timeout: float = 1.0) -> None:
    """Returns once every thread of process pid is stopped (Linux: state T in
    /proc/PID/task/TID/stat); raises TimeoutError after timeout seconds.
    Without /proc (not Linux) it returns at once."""
    if not os.path.isdir("/proc/self/task"):
        return
    deadline = time.monotonic() + timeout
    while not _all_threads_stopped(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"holdfast: process {pid} did not stop within {timeout}s of SIGSTOP")
        time.sleep(0.001)
