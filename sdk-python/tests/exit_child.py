"""One short-lived program for test_exit: takes a lock and exits.

    python exit_child.py ADDR SCENARIO

- ``unlock``: AsyncClient acquire, unlock, close, exit.
- ``watchdog``: AsyncClient acquire with a short TTL and exit while its
  watchdog renews (asyncio.run cancels it on the way out), unreleased.
- ``blocking-watchdog``: the blocking Client, the same, without close(): the
  watchdog's thread is still renewing when the interpreter finalises.

The random pause spreads the exits over the renewal cycle, so some land in
the middle of a renewal.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

import holdfast

# The watchdog scenarios renew every 0.1 s, so exits often meet a renewal
# in flight; the unlock scenario takes an ordinary lease (a loaded machine
# must not turn its unlock into a lost lease).
WATCHDOG_TTL = 0.3
UNLOCK_TTL = 10.0


async def async_child(addr: str, scenario: str) -> None:
    client = holdfast.AsyncClient(addr)
    ttl = UNLOCK_TTL if scenario == "unlock" else WATCHDOG_TTL
    guard = await client.acquire(f"exit/{scenario}/{os.getpid()}", ttl=ttl)
    if scenario == "unlock":
        await guard.unlock()
        await client.close()
    else:
        await asyncio.sleep(random.uniform(0, WATCHDOG_TTL))


def blocking_child(addr: str) -> None:
    client = holdfast.Client(addr)
    client.acquire(f"exit/blocking/{os.getpid()}", ttl=WATCHDOG_TTL)
    time.sleep(random.uniform(0, WATCHDOG_TTL))


def main() -> None:
    addr, scenario = sys.argv[1], sys.argv[2]
    if scenario == "blocking-watchdog":
        blocking_child(addr)
    else:
        asyncio.run(async_child(addr, scenario))
    print("done", flush=True)


if __name__ == "__main__":
    main()
