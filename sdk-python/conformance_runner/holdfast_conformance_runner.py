"""The Python SDK's adapter for holdfast's SDK-level conformance specs.

It reads runner-protocol commands (JSON lines, version 1, see
conformance/sdkrunner/PROTOCOL.md) on stdin, performs each with the SDK's
public asyncio API (AsyncClient, AsyncGuard) and writes one result per
command, plus events, on stdout. Logs go to stderr::

    holdfast-conformance sdk --runner \\
        "sdk-python/.venv/bin/python sdk-python/conformance_runner/holdfast_conformance_runner.py"

64-bit integers (fencing tokens, HLC wall times) travel as decimal strings.
Durations on the wire are milliseconds; the SDK takes seconds (``ttl_native``
is passed as written: a bare number of seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import holdfast
from holdfast import (
    AsyncClient,
    AsyncGuard,
    AsyncLeadership,
    ClientClosedError,
    ClockOffsetError,
    ExpiryMargin,
    HoldfastError,
    InvalidArgumentError,
    Leader,
    LeaseEvent,
    LeaseLostError,
    LockContext,
    LockReleasedError,
    LockState,
    NotAcquiredError,
    PermissionDeniedError,
    StaleTokenError,
    Timestamp,
    UnauthenticatedError,
    UnavailableError,
    validate_write,
)

PROTOCOL_VERSION = 1
Result = dict[str, Any]
Args = dict[str, Any]


class CommandError(Exception):
    """A command's failure with the protocol's language-neutral kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_KINDS: list[tuple[type[BaseException], str]] = [
    (CommandError, ""),
    (NotAcquiredError, "not_acquired"),
    (LeaseLostError, "lease_lost"),
    (LockReleasedError, "released"),
    (StaleTokenError, "stale_token"),
    (InvalidArgumentError, "invalid_argument"),
    (ClockOffsetError, "invalid_argument"),
    (UnavailableError, "unavailable"),
    (UnauthenticatedError, "unauthenticated"),
    (PermissionDeniedError, "permission_denied"),
    (ClientClosedError, "client_closed"),
    (asyncio.CancelledError, "canceled"),
]


def error_object(err: BaseException) -> Result:
    """The protocol's error object for what a command raised."""
    kind = "internal"
    for cls, name in _KINDS:
        if isinstance(err, cls):
            kind = err.kind if isinstance(err, CommandError) else name
            break
    out: Result = {"kind": kind, "message": str(err) or type(err).__name__}
    if isinstance(err, HoldfastError):
        out["code"] = err.code
    if isinstance(err, LeaseLostError):
        out["reason"] = err.reason
        if isinstance(err.__cause__, HoldfastError):
            out["cause_code"] = err.__cause__.code
    if isinstance(err, NotAcquiredError) and err.current is not None:
        out["current"] = lock_state(err.current)
    return out


def stamp(t: Timestamp) -> Result:
    """A stamp in the protocol's form."""
    return {"wall_time_ns": str(t.wall_time_ns), "logical": t.logical}


def lock_state(s: LockState) -> Result:
    """A held lock in the protocol's form."""
    return {
        "key": s.key,
        "fencing_token": str(s.fencing_token),
        "holder": s.holder,
        "stamp": stamp(s.stamp),
        "waiters": s.waiters,
        "kind": s.kind,
        "limit": s.limit,
        "permits_in_use": s.permits_in_use,
        "holders": [
            {
                "fencing_token": str(g.fencing_token),
                "holder": g.holder,
                "permits": g.permits,
                "mode": g.mode,
                "stamp": stamp(g.stamp),
                **({"value": g.value} if g.value else {}),
            }
            for g in s.holders
        ],
    }


def leader(ld: Leader) -> Result:
    """A leader in the protocol's form."""
    return {"key": ld.key, "term": str(ld.term), "holder": ld.holder, "value": ld.value, "stamp": stamp(ld.stamp)}


def arg_value(args: Args) -> str:
    """The value argument (absent: "")."""
    v = args.get("value", "")
    if not isinstance(v, str):
        raise CommandError("bad_command", "argument value: want a string")
    return v


def write(msg: Result) -> None:
    """Writes one line to stdout (all writes happen on the event loop's thread)."""
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def arg_str(args: Args, name: str) -> str:
    """A required non-empty string argument."""
    v = args.get(name)
    if not isinstance(v, str) or not v:
        raise CommandError("bad_command", f"argument {name}: want a non-empty string")
    return v


def arg_ms(args: Args, name: str) -> float:
    """A number of milliseconds, in seconds (absent: 0)."""
    v = args.get(name, 0)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CommandError("bad_command", f"argument {name}: want a number of milliseconds")
    return float(v) / 1000.0


def arg_u64(args: Args, name: str) -> int:
    """A 64-bit integer sent as a decimal string."""
    v = args.get(name)
    if not isinstance(v, str) or not v.isdigit():
        raise CommandError("bad_command", f"argument {name}: want a decimal string")
    return int(v)


def ttl_of(args: Args) -> Any | None:
    """The lock's TTL as the SDK gets it: ttl_native as written (a bare
    number of seconds, "inf" the float infinity), else ttl_ms in seconds,
    else None (the SDK's default)."""
    if "ttl_native" in args:
        v = args["ttl_native"]
        return math.inf if v == "inf" else v
    if "ttl_ms" in args:
        return arg_ms(args, "ttl_ms")
    return None


class Adapter:
    """The clients, guards and runs a run of the suite created."""

    def __init__(self) -> None:
        self.clients: dict[str, AsyncClient] = {}
        self.guards: dict[str, AsyncGuard] = {}
        self.guard_ids: dict[tuple[str, int], str] = {}  # (key, fencing token) -> id, for lease events
        self.runs: dict[str, asyncio.Event] = {}
        self.leads: dict[str, AsyncLeadership] = {}
        self.observes: dict[str, asyncio.Task[int]] = {}  # observe id -> the task iterating observe()
        self.tasks: dict[Any, asyncio.Task[None]] = {}  # command id -> its task, for cancel
        self.seq = 0

    def next_id(self, prefix: str) -> str:
        """A fresh id: c1, g2, ..."""
        self.seq += 1
        return f"{prefix}{self.seq}"

    def client(self, args: Args) -> AsyncClient:
        """The client named by args["client"]."""
        cid = arg_str(args, "client")
        if cid not in self.clients:
            raise CommandError("bad_command", f"unknown client {cid!r}")
        return self.clients[cid]

    def guard(self, args: Args) -> AsyncGuard:
        """The guard named by args["guard"]."""
        gid = arg_str(args, "guard")
        if gid not in self.guards:
            raise CommandError("bad_command", f"unknown guard {gid!r}")
        return self.guards[gid]

    def lease_event(self, ev: LeaseEvent) -> None:
        """The client's on_lease_event listener: one lease_event line each."""
        out: Result = {"event": "lease_event", "type": ev.type, "key": ev.key, "fencing_token": str(ev.fencing_token)}
        gid = self.guard_ids.get((ev.key, ev.fencing_token))
        if gid is not None:
            out["guard"] = gid
        if ev.type == "renewed":
            out["renewals"] = ev.renewals
        if ev.reason is not None:
            out["reason"] = ev.reason
        cause = ev.error.__cause__ if ev.type == "lost" and ev.error is not None else ev.error
        if isinstance(cause, HoldfastError):
            out["error_code"] = cause.code
        write(out)

    def track(self, guard: AsyncGuard) -> Result:
        """Registers a new guard and its lease_lost event; the lock result."""
        gid = self.next_id("g")
        self.guards[gid] = guard
        self.guard_ids[(guard.key, guard.fencing_token)] = gid
        guard.add_lost_callback(lambda err: write({"event": "lease_lost", "guard": gid, "reason": err.reason}))
        # What the guard says it holds, never echoed from the arguments.
        return {
            "guard": gid,
            "fencing_token": str(guard.fencing_token),
            "stamp": stamp(guard.stamp),
            "kind": guard.kind,
            "limit": guard.limit,
            "permits": guard.permits,
            "mode": guard.mode,
        }

    # ---- commands ----

    async def cmd_hello(self, args: Args) -> Result:
        """The handshake."""
        return {
            "protocol_version": PROTOCOL_VERSION,
            "sdk": "python",
            "version": holdfast.__version__,
            "duration_unit": "s",
            "capabilities": [
                "protocol:connect",
                "protocol:grpc-web",
                "clock_update",
                "event:lease_lost",
                "request_ids",
                "semaphore",
                "rwlock",
                "election",
            ],
        }

    async def cmd_connect(self, args: Args) -> Result:
        """A new client with the options the suite gives."""
        protocol = args.get("protocol") or "connect"
        if protocol not in ("connect", "grpc-web"):
            raise CommandError("unsupported", f"protocol {protocol}")
        opts: dict[str, Any] = {}
        if "retry_budget_ms" in args:
            opts["retry_budget"] = arg_ms(args, "retry_budget_ms")
        if "request_timeout_ms" in args:
            opts["request_timeout"] = arg_ms(args, "request_timeout_ms")
        margin = args.get("expiry_margin")
        if isinstance(margin, dict):
            opts["expiry_margin"] = ExpiryMargin(
                drift_factor=margin.get("drift_factor", 0.01),
                fixed=arg_ms(margin, "fixed_ms") if "fixed_ms" in margin else 0.02,
            )
        if args.get("lease_events"):
            opts["on_lease_event"] = self.lease_event
        for name in ("bearer_token", "ca_file", "cert_file", "key_file"):
            if args.get(name):
                opts[name] = args[name]
        if isinstance(args.get("headers"), dict):
            opts["headers"] = args["headers"]
        cid = self.next_id("c")
        self.clients[cid] = AsyncClient(args.get("addr"), protocol=protocol, **opts)  # type: ignore[arg-type]
        return {"client": cid}

    async def cmd_lock(self, args: Args) -> Result:
        """acquire, or try_acquire with try: true; a semaphore or rwlock
        grant with kind."""
        c = self.client(args)
        k = arg_str(args, "key")
        holder: str | None = args.get("holder") or None
        ttl = ttl_of(args)
        kind = args.get("kind") or "mutex"
        if kind != "mutex":
            return await self.grant(c, k, kind, args, ttl, holder)
        if args.get("try"):
            # try_acquire takes no wait: a wait_ms given with it has nowhere to go.
            got = await c.try_acquire(k, ttl=ttl, holder=holder)
            if got is None:
                # The SDK's answer for "held" is None; its error for the
                # situation (and so the code) is NotAcquiredError's.
                raise NotAcquiredError(k, None)
            return self.track(got)
        wait = None if args.get("wait_unset") else arg_ms(args, "wait_ms")
        return self.track(await c.acquire(k, ttl=ttl, wait=wait, holder=holder))

    async def grant(self, c: AsyncClient, k: str, kind: str, args: Args, ttl: Any, holder: str | None) -> Result:
        """A semaphore (limit and permits passed as given: the SDK must refuse
        bad ones) or rwlock (mode) grant, through the same context as a lock."""
        wait = None if args.get("wait_unset") or args.get("try") else arg_ms(args, "wait_ms")
        opts: dict[str, Any] = {"ttl": ttl, "wait": wait, "holder": holder}
        ctx: LockContext
        if kind == "semaphore":
            ctx = c.semaphore(k, args.get("limit", 0), permits=args.get("permits"), **opts)
        elif kind == "rwlock":
            mode = args.get("mode")
            if mode not in ("shared", "exclusive"):
                raise CommandError(
                    "bad_command", f"argument mode: want 'shared' or 'exclusive' for an rwlock, got {mode!r}"
                )
            rw = c.rwlock(k)
            ctx = rw.read(**opts) if mode == "shared" else rw.write(**opts)
        else:
            raise CommandError("bad_command", f"argument kind: want 'mutex', 'semaphore' or 'rwlock', got {kind!r}")
        if args.get("try"):
            got = await ctx.try_acquire()
            if got is None:
                raise NotAcquiredError(k, None)
            return self.track(got)
        return self.track(await ctx.acquire())

    async def cmd_lock_many(self, args: Args) -> Result:
        """A guard on every key, all acquired at once (one attempt each)."""
        c = self.client(args)
        keys = args.get("keys")
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise CommandError("bad_command", "argument keys: want a list of non-empty strings")
        ttl = ttl_of(args)
        got = await asyncio.gather(*(c.acquire(k, ttl=ttl, wait=0) for k in keys), return_exceptions=True)
        failed = next((g for g in got if isinstance(g, BaseException)), None)
        if failed is not None:
            for g in got:
                if isinstance(g, AsyncGuard):
                    with contextlib.suppress(HoldfastError):
                        await g.unlock()
            raise failed
        return {"guards": [self.track(g) for g in got if isinstance(g, AsyncGuard)]}

    def leadership(self, args: Args) -> AsyncLeadership:
        """The leadership named by args["guard"]."""
        gid = arg_str(args, "guard")
        if gid not in self.leads:
            raise CommandError("bad_command", f"unknown leadership {gid!r} (guards of campaign only)")
        return self.leads[gid]

    async def cmd_campaign(self, args: Args) -> Result:
        """election(key, ...).campaign(value)."""
        wait = None if args.get("wait_unset") else arg_ms(args, "wait_ms")
        election = self.client(args).election(
            arg_str(args, "key"), ttl=ttl_of(args), wait=wait, holder=args.get("holder") or None
        )
        lead = await election.campaign(arg_value(args))
        res = self.track(lead.guard)
        self.leads[res["guard"]] = lead
        return {**res, "term": str(lead.term), "value": lead.value}

    async def cmd_proclaim(self, args: Args) -> Result:
        """lead.proclaim(value)."""
        await self.leadership(args).proclaim(arg_value(args))
        return {}

    async def cmd_resign(self, args: Args) -> Result:
        """lead.resign()."""
        await self.leadership(args).resign()
        return {}

    async def cmd_leader(self, args: Args) -> Result:
        """election(key).leader()."""
        ld = await self.client(args).election(arg_str(args, "key")).leader()
        return {} if ld is None else {"leader": leader(ld)}

    async def cmd_observe(self, args: Args) -> Result:
        """async for over election(key).observe(), each message an observed
        event, until observe_stop cancels the task iterating it."""
        name = arg_str(args, "observe")
        if name in self.observes:
            raise CommandError("bad_command", f"observe {name!r} is already running")
        election = self.client(args).election(arg_str(args, "key"))

        count = [0]

        async def iterate() -> int:
            async for o in election.observe():
                count[0] += 1
                write({"event": "observed", "observe": name, **({"leader": leader(o.leader)} if o.leader else {})})
            return count[0]

        task = asyncio.get_running_loop().create_task(iterate())
        self.observes[name] = task
        try:
            return {"messages": await asyncio.shield(task)}
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this command was cancelled (the cancel command), not stopped
            return {"messages": count[0]}
        finally:
            self.observes.pop(name, None)
            if not task.done():
                task.cancel()

    async def cmd_observe_stop(self, args: Args) -> Result:
        """Ends an observe by cancelling the task iterating it."""
        name = arg_str(args, "observe")
        task = self.observes.get(name)
        if task is None:
            raise CommandError("bad_command", f"unknown observe {name!r} (none running under that name)")
        task.cancel()
        return {}

    async def cmd_unlock(self, args: Args) -> Result:
        """unlock(): a lost lease raises LeaseLostError; a second unlock is a no-op."""
        await self.guard(args).unlock()
        return {}

    async def cmd_extend(self, args: Args) -> Result:
        """extend(ttl), 0: the guard's TTL."""
        ttl = arg_ms(args, "ttl_ms")
        await self.guard(args).extend(ttl if ttl > 0 else None)
        return {}

    async def cmd_fencing_token(self, args: Args) -> Result:
        """The token accessor."""
        return {"fencing_token": str(self.guard(args).fencing_token)}

    async def cmd_guard_state(self, args: Args) -> Result:
        """The guard's own view."""
        g = self.guard(args)
        out: Result = {"remaining_ms": g.remaining() * 1000, "renewals": g.renewals}
        if g.held:
            out["state"] = "held"
        elif g.lost_error is not None:
            out.update(state="lost", reason=g.lost_error.reason)
        else:
            out["state"] = "released"
        return out

    async def cmd_run_if_free(self, args: Args) -> Result:
        """run_if_free(fn): fn reports run_started and waits for run_finish."""
        c = self.client(args)
        run = arg_str(args, "run")
        holder: str | None = args.get("holder") or None

        async def fn(guard: AsyncGuard) -> str:
            token = str(guard.fencing_token)
            finish = self.runs.setdefault(run, asyncio.Event())
            write({"event": "run_started", "run": run, "fencing_token": token})
            await finish.wait()
            return token

        ttl = arg_ms(args, "ttl_ms") if "ttl_ms" in args else None
        try:
            res = await c.run_if_free(arg_str(args, "key"), fn, ttl=ttl, holder=holder)
        finally:
            self.runs.pop(run, None)
        return {"ran": True, "value": res.value} if res.ran else {"ran": False}

    async def cmd_run_finish(self, args: Args) -> Result:
        """Lets a run_if_free's function return."""
        run = arg_str(args, "run")
        if run not in self.runs:
            raise CommandError("bad_command", f"unknown run {run!r}")
        self.runs[run].set()
        return {}

    async def cmd_cancel(self, args: Args) -> Result:
        """Cancels the task of command args["id"] (if still running)."""
        task = self.tasks.get(args.get("id"))
        if task is not None:
            task.cancel()
        return {}

    async def cmd_validate_write(self, args: Args) -> Result:
        """The resource-side check; the new watermark."""
        return {"watermark": str(validate_write(arg_u64(args, "token"), arg_u64(args, "watermark")))}

    async def cmd_clock_now(self, args: Args) -> Result:
        """Ticks and reads the client's HLC."""
        return {"stamp": stamp(self.client(args).clock.now())}

    async def cmd_clock_update(self, args: Args) -> Result:
        """Merges a remote stamp into the client's HLC."""
        c = self.client(args)
        s = args.get("stamp")
        if not isinstance(s, dict) or not isinstance(s.get("wall_time_ns"), str):
            raise CommandError("bad_command", "argument stamp: want {wall_time_ns: decimal string, logical: number}")
        c.clock.update(Timestamp(int(s["wall_time_ns"]), int(s.get("logical", 0))))
        return {}

    async def cmd_inspect(self, args: Args) -> Result:
        """Who holds the key."""
        st = await self.client(args).inspect(arg_str(args, "key"))
        return {"held": False} if st is None else {"held": True, "state": lock_state(st)}

    async def cmd_list(self, args: Args) -> Result:
        """Every held lock under the prefix."""
        prefix = args.get("prefix") or ""
        return {"locks": [lock_state(s) async for s in self.client(args).list(prefix)]}

    async def cmd_server_info(self, args: Args) -> Result:
        """The server's version and backend."""
        info = await self.client(args).server_info()
        return {"version": info.version, "backend": info.backend.name}

    async def cmd_close(self, args: Args) -> Result:
        """Closes one client (the shutdown close is handled by main)."""
        cid = arg_str(args, "client")
        c = self.client(args)
        del self.clients[cid]
        await c.close()
        return {}

    # ---- plumbing ----

    def handler(self, cmd: str) -> Callable[[Args], Awaitable[Result]]:
        """The method for a command name."""
        fn = getattr(self, f"cmd_{cmd}", None) if cmd.isidentifier() else None
        if fn is None:

            async def unknown(_: Args) -> Result:
                raise CommandError("unsupported", f"unknown command {cmd!r}")

            return unknown
        return fn  # type: ignore[no-any-return]

    async def run_one(self, req: Result) -> None:
        """Runs one command and writes its one response."""
        rid = req.get("id")
        args = req.get("args") or {}
        try:
            result = await self.handler(str(req.get("cmd", "")))(args)
        except (Exception, asyncio.CancelledError) as e:  # noqa: BLE001 - every failure is an answer
            write({"id": rid, "error": error_object(e)})
        else:
            write({"id": rid, "result": result})
        finally:
            self.tasks.pop(rid, None)

    def start(self, req: Result) -> None:
        """Starts a command on its own task: a lock that waits on the server
        must not hold up the unlock that frees it."""
        task = asyncio.get_running_loop().create_task(self.run_one(req))
        self.tasks[req.get("id")] = task

    async def shutdown(self) -> None:
        """Ends what is still running and closes every client (releasing the
        guards still held)."""
        for event in self.runs.values():
            event.set()
        for task in list(self.tasks.values()):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks.values()))
        clients = list(self.clients.values())
        self.clients.clear()
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def main() -> int:
    """Serves commands from stdin until close (without a client) or EOF."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=4 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    adapter = Adapter()
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
        adapter.start(req)
    await adapter.shutdown()
    if close_id is not None:
        write({"id": close_id, "result": {}})
    return 0


if __name__ == "__main__":
    print(f"conformance runner: holdfast {holdfast.__version__} from {holdfast.__file__}", file=sys.stderr)
    sys.exit(asyncio.run(main()))
