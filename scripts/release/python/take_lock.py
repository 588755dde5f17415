"""What a new user of the Python package runs first: take a lock with the
async and the blocking client against HOLDFAST_ADDR. test-python.sh runs it
from a fresh virtualenv outside the checkout.

    python take_lock.py VERSION
"""

import asyncio
import importlib.metadata
import os
import sys

import holdfast


async def with_async_client(addr: str) -> int:
    async with holdfast.AsyncClient(addr, holder="release-test-async") as client:
        async with client.lock("release/python/async", ttl=10) as guard:
            held = await client.inspect("release/python/async")
            assert held is not None and held.fencing_token == guard.fencing_token, held
            return guard.fencing_token


def with_blocking_client(addr: str) -> int:
    with holdfast.Client(addr, holder="release-test-blocking") as client:
        with client.lock("release/python/blocking", ttl=10) as guard:
            held = client.inspect("release/python/blocking")
            assert held is not None and held.fencing_token == guard.fencing_token, held
            return guard.fencing_token


def main() -> None:
    want = sys.argv[1]
    got = importlib.metadata.version("holdfast")
    assert got == want, f"installed holdfast {got}, want {want}"
    addr = os.environ["HOLDFAST_ADDR"]
    print(f"holdfast {got} from {os.path.dirname(holdfast.__file__)}")
    print(f"async client: lock taken, fencing token {asyncio.run(with_async_client(addr))}, released")
    print(f"blocking client: lock taken, fencing token {with_blocking_client(addr)}, released")


if __name__ == "__main__":
    main()
