"""The Python SDK's adapter for holdfast's SDK-level conformance specs.

It reads runner-protocol commands (JSON lines, see
conformance/sdkrunner/PROTOCOL.md) on stdin, performs each with the asyncio
client (AsyncClient, AsyncGuard) and writes one result per command, plus
lease_lost events, on stdout. Logs go to stderr::

    holdfast-conformance sdk --runner "sdk-python/.venv/bin/python sdk-python/conformance_runner/holdfast_conformance_runner.py"

64-bit integers (fencing tokens, HLC wall times) travel as decimal strings.
Durations on the wire are milliseconds; the SDK takes seconds.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Optional

import holdfast
from holdfast import (
    AsyncClient,
    AsyncGuard,
    ClientClosedError,
    ClockOffsetError,
    InvalidArgumentError,
    LeaseLostError,
    LockReleasedError,
    NotAcquiredError,
    StaleTokenError,
    Timestamp,
    UnavailableError,
    validate_write,
)

PROTOCOL_VERSION = 1


class CommandError(Exception):
    """A command's failure with the protocol's language-neutral kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def kind_of(err: BaseException) -> str:
    if isinstance(err, CommandError):
        return err.kind
    if isinstance(err, NotAcquiredError):
        return "not_acquired"
    if isinstance(err, LeaseLostError):
        return "lease_lost"
    if isinstance(err, LockReleasedError):
        return "released"
    if isinstance(err, StaleTokenError):
        return "stale_token"
    if isinstance(err, (InvalidArgumentError, ClockOffsetError)):
        return "invalid_argument"
    if isinstance(err, UnavailableError):
        return "unavailable"
    if isinstance(err, ClientClosedError):
        return "client_closed"
    return "internal"


def reason(r: str) -> str:
    """The SDK's reasons are the protocol's (and the Go SDK's) names."""
    return r


def stamp(t: Timestamp) -> dict[str, Any]:
    return {"wall_time_ns": str(t.wall_time_ns), "logical": t.logical}


def write(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def arg_str(args: dict[str, Any], name: str) -> str:
    v = args.get(name)
    if not isinstance(v, str) or not v:
        raise CommandError("bad_command", f"argument {name}: want a non-empty string")
    return v


def arg_ms(args: dict[str, Any], name: str) -> float:
    v = args.get(name, 0)
    if not isinstance(v, (int, float)):
        raise CommandError("bad_command", f"argument {name}: want a number of milliseconds")
    return float(v) / 1000.0


def arg_u64(args: dict[str, Any], name: str) -> int:
    v = args.get(name)
    if not isinstance(v, str) or not v.isdigit():
        raise CommandError("bad_command", f"argument {name}: want a decimal string")
    return int(v)


class Adapter:
    def __init__(self) -> None:
        self.clients: dict[str, AsyncClient] = {}
        self.guards: dict[str, AsyncGuard] = {}
        self.seq = 0

    def next_id(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}{self.seq}"

    def client(self, args: dict[str, Any]) -> AsyncClient:
        cid = arg_str(args, "client")
        if cid not in self.clients:
            raise CommandError("bad_command", f"unknown client {cid!r}")
        return self.clients[cid]

    def guard(self, args: dict[str, Any]) -> tuple[str, AsyncGuard]:
        gid = arg_str(args, "guard")
        if gid not in self.guards:
            raise CommandError("bad_command", f"unknown guard {gid!r}")
        return gid, self.guards[gid]

    async def handle(self, cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        if cmd == "hello":
            return {
                "protocol_version": PROTOCOL_VERSION,
                "sdk": "python",
                "version": f"holdfast (this source tree), python {sys.version.split()[0]}",
                "capabilities": ["protocol:connect", "protocol:grpc-web", "clock_update", "event:lease_lost"],
            }
        if cmd == "connect":
            protocol = args.get("protocol") or "connect"
            if protocol not in ("connect", "grpc-web"):
                raise CommandError("unsupported", f"protocol {protocol}")
            cid = self.next_id("c")
            self.clients[cid] = AsyncClient(arg_str(args, "addr"), protocol=protocol)
            return {"client": cid}
        if cmd == "lock":
            c = self.client(args)
            holder: Optional[str] = args.get("holder") or None
            wait = 0.0 if args.get("try") else arg_ms(args, "wait_ms")
            g = await c.acquire(arg_str(args, "key"), ttl=arg_ms(args, "ttl_ms"), wait=wait, holder=holder)
            gid = self.next_id("g")
            self.guards[gid] = g
            g.add_lost_callback(lambda err: write({"event": "lease_lost", "guard": gid, "reason": reason(err.reason)}))
            return {"guard": gid, "fencing_token": str(g.fencing_token), "stamp": stamp(g.stamp)}
        if cmd == "unlock":
            # The SDK's own semantics: a lost lease raises LeaseLostError, a
            # second unlock after a successful one is a no-op.
            _, g = self.guard(args)
            await g.unlock()
            return {}
        if cmd == "extend":
            _, g = self.guard(args)
            ttl = arg_ms(args, "ttl_ms")
            await g.extend(ttl if ttl > 0 else None)
            return {}
        if cmd == "fencing_token":
            _, g = self.guard(args)
            return {"fencing_token": str(g.fencing_token)}
        if cmd == "guard_state":
            _, g = self.guard(args)
            if g.held:
                return {"state": "held"}
            if g.lost_error is not None:
                return {"state": "lost", "reason": reason(g.lost_error.reason)}
            return {"state": "released"}
        if cmd == "validate_write":
            validate_write(arg_u64(args, "token"), arg_u64(args, "watermark"))
            return {}
        if cmd == "clock_now":
            return {"stamp": stamp(self.client(args).clock.now())}
        if cmd == "clock_update":
            c = self.client(args)
            s = args.get("stamp")
            if not isinstance(s, dict) or not isinstance(s.get("wall_time_ns"), str):
                raise CommandError("bad_command", "argument stamp: want {wall_time_ns: decimal string, logical: number}")
            c.clock.update(Timestamp(int(s["wall_time_ns"]), int(s.get("logical", 0))))
            return {}
        if cmd == "inspect":
            st = await self.client(args).inspect(arg_str(args, "key"))
            if st is None:
                return {"held": False}
            return {
                "held": True,
                "state": {"fencing_token": str(st.fencing_token), "holder": st.holder, "stamp": stamp(st.stamp), "waiters": st.waiters},
            }
        if cmd == "close":
            cid = arg_str(args, "client")
            c = self.client(args)
            del self.clients[cid]
            await c.close()
            return {}
        raise CommandError("unsupported", f"unknown command {cmd!r}")

    async def close_all(self) -> None:
        clients = list(self.clients.values())
        self.clients.clear()
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

    async def run_one(self, req: dict[str, Any]) -> None:
        rid = req.get("id")
        try:
            result = await self.handle(req.get("cmd", ""), req.get("args") or {})
        except Exception as e:  # noqa: BLE001 - every failure becomes an answer
            write({"id": rid, "error": {"kind": kind_of(e), "message": str(e)}})
        else:
            write({"id": rid, "result": result})


async def main() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=4 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    adapter = Adapter()
    tasks: set[asyncio.Task[None]] = set()
    close_id: Any = None
    while True:
        line = await reader.readline()
        if not line:
            break
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as e:
            print(f"conformance runner: malformed command {line!r}: {e}", file=sys.stderr)
            return 1
        if req.get("cmd") == "close" and not (req.get("args") or {}).get("client"):
            close_id = req.get("id")
            break
        # Each command runs on its own: a lock that waits on the server must
        # not hold up the unlock that frees it.
        t = loop.create_task(adapter.run_one(req))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
    await adapter.close_all()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    if close_id is not None:
        write({"id": close_id, "result": {}})
    return 0


if __name__ == "__main__":
    print(f"conformance runner: holdfast from {holdfast.__file__}", file=sys.stderr)
    sys.exit(asyncio.run(main()))
