"""Take, extend and release a lock. Run a server first (`bin/holdfast serve`),
then: .venv/bin/python examples/quickstart.py"""

import asyncio
import os

import holdfast


async def main() -> None:
    """Takes, extends and releases examples/report, then again with the blocking client."""
    addr = os.environ.get("HOLDFAST_ADDR", "http://127.0.0.1:7410")
    async with holdfast.AsyncClient(addr, holder="quickstart") as client:
        # The guard's watchdog renews the 10 s lease about every 3 s.
        async with client.lock("examples/report", ttl=10) as guard:
            print(f"acquired examples/report, fencing token {guard.fencing_token}")
            guard.add_lost_callback(lambda err: print("lease lost:", err))

            # Fence every write: the resource keeps the highest token it has
            # seen and refuses older ones (a holder that overran its lease).
            watermark = holdfast.validate_write(guard.fencing_token, 0)

            await guard.extend(20)
            print(f"extended: {guard.remaining():.1f} s left")

            try:
                await client.acquire("examples/report", ttl=10, wait=0)
            except holdfast.NotAcquiredError as e:
                print(f"as expected, not acquired: held by {e.current.holder if e.current else '?'}")
        print("released at the end of the block")

    # The blocking client does the same from plain threads.
    with holdfast.Client(addr) as sync_client, sync_client.lock("examples/report", ttl=10) as guard:
        print(f"sync client holds token {guard.fencing_token} (watermark was {watermark})")


if __name__ == "__main__":
    asyncio.run(main())
