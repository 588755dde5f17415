/**
 * The TypeScript SDK's adapter for holdfast's SDK-level conformance specs.
 *
 * It reads runner-protocol commands (JSON lines, one per line, see
 * conformance/sdkrunner/PROTOCOL.md) on stdin, performs each with this SDK's
 * ergonomic layer (createClient, lock builder, Guard) and writes one result
 * per command, plus lease_lost events, on stdout. Logs go to stderr.
 *
 *   npm run build:conformance-runner
 *   holdfast-conformance sdk --runner "node build-conformance-runner/conformance-runner/main.js"
 *
 * 64-bit integers (fencing tokens, HLC wall times) travel as decimal
 * strings, so nothing is rounded to a double.
 */
import { createInterface } from "node:readline";
import {
  ClientClosedError,
  ClockOffsetError,
  Guard,
  InvalidArgumentError,
  LeaseLostError,
  LockReleasedError,
  NotAcquiredError,
  StaleTokenError,
  Timestamp,
  UnavailableError,
  createClient,
  validateWrite,
  type Client,
  type LeaseLostReason,
} from "../src/node.js";

const PROTOCOL_VERSION = 1;

interface Request {
  id: number;
  cmd: string;
  args?: Record<string, unknown>;
}

/** A command's failure, with the protocol's language-neutral kind. */
class CommandError extends Error {
  constructor(
    readonly kind: string,
    message: string,
  ) {
    super(message);
  }
}

const clients = new Map<string, Client>();
const guards = new Map<string, Guard>();
let seq = 0;

function write(msg: unknown): void {
  process.stdout.write(JSON.stringify(msg) + "\n");
}

function kindOf(err: unknown): string {
  if (err instanceof CommandError) return err.kind;
  if (err instanceof NotAcquiredError) return "not_acquired";
  if (err instanceof LeaseLostError) return "lease_lost";
  if (err instanceof LockReleasedError) return "released";
  if (err instanceof StaleTokenError) return "stale_token";
  if (err instanceof InvalidArgumentError || err instanceof ClockOffsetError) return "invalid_argument";
  if (err instanceof UnavailableError) return "unavailable";
  if (err instanceof ClientClosedError) return "client_closed";
  return "internal";
}

/** The SDK's reasons are the protocol's (and the Go SDK's) names. */
function reason(r: LeaseLostReason): string {
  return r;
}

function stamp(t: Timestamp): { wall_time_ns: string; logical: number } {
  return { wall_time_ns: t.wallTimeNs.toString(), logical: t.logical };
}

function str(args: Record<string, unknown>, name: string): string {
  const v = args[name];
  if (typeof v !== "string" || v === "") throw new CommandError("bad_command", `argument ${name}: want a non-empty string`);
  return v;
}

function num(args: Record<string, unknown>, name: string): number {
  const v = args[name] ?? 0;
  if (typeof v !== "number") throw new CommandError("bad_command", `argument ${name}: want a number`);
  return v;
}

function u64(args: Record<string, unknown>, name: string): bigint {
  const v = args[name];
  if (typeof v !== "string" || !/^[0-9]+$/.test(v)) throw new CommandError("bad_command", `argument ${name}: want a decimal string`);
  return BigInt(v);
}

function client(args: Record<string, unknown>): Client {
  const id = str(args, "client");
  const c = clients.get(id);
  if (!c) throw new CommandError("bad_command", `unknown client ${JSON.stringify(id)}`);
  return c;
}

function guard(args: Record<string, unknown>): [string, Guard] {
  const id = str(args, "guard");
  const g = guards.get(id);
  if (!g) throw new CommandError("bad_command", `unknown guard ${JSON.stringify(id)}`);
  return [id, g];
}

function guardState(g: Guard): { state: string; reason?: string } {
  if (g.held) return { state: "held" };
  const lost = g.lostError;
  if (lost) return { state: "lost", reason: reason(lost.reason) };
  return { state: "released" };
}

async function handle(cmd: string, args: Record<string, unknown>): Promise<unknown> {
  switch (cmd) {
    case "hello":
      return {
        protocol_version: PROTOCOL_VERSION,
        sdk: "typescript",
        version: `@holdfast/sdk (this source tree), node ${process.version}`,
        capabilities: ["protocol:connect", "protocol:grpc", "protocol:grpc-web", "clock_update", "event:lease_lost"],
      };
    case "connect": {
      const protocol = (args.protocol as string | undefined) || "connect";
      if (protocol !== "connect" && protocol !== "grpc" && protocol !== "grpc-web") {
        throw new CommandError("unsupported", `protocol ${protocol}`);
      }
      const id = `c${++seq}`;
      clients.set(id, createClient(str(args, "addr"), { protocol }));
      return { client: id };
    }
    case "lock": {
      const c = client(args);
      const key = str(args, "key");
      const opts = {
        ttl: num(args, "ttl_ms"),
        wait: num(args, "wait_ms"),
        ...(typeof args.holder === "string" && args.holder !== "" ? { holder: args.holder } : {}),
      };
      const g = args.try ? await c.tryAcquire(key, opts) : await c.acquire(key, opts);
      if (!g) throw new CommandError("not_acquired", `lock ${JSON.stringify(key)} is held`);
      const id = `g${++seq}`;
      guards.set(id, g);
      g.signal.addEventListener(
        "abort",
        () => {
          const why: unknown = g.signal.reason;
          if (why instanceof LeaseLostError) write({ event: "lease_lost", guard: id, reason: reason(why.reason) });
        },
        { once: true },
      );
      return { guard: id, fencing_token: g.fencingToken().toString(), stamp: stamp(g.stamp) };
    }
    case "unlock": {
      // The SDK's own semantics: a lost lease rejects with LeaseLostError,
      // a second unlock after a successful one is a no-op.
      const [, g] = guard(args);
      await g.unlock();
      return {};
    }
    case "extend": {
      const [, g] = guard(args);
      const ttl = num(args, "ttl_ms");
      await g.extend(ttl > 0 ? ttl : undefined);
      return {};
    }
    case "fencing_token": {
      const [, g] = guard(args);
      return { fencing_token: g.fencingToken().toString() };
    }
    case "guard_state": {
      const [, g] = guard(args);
      return guardState(g);
    }
    case "validate_write":
      validateWrite(u64(args, "token"), u64(args, "watermark"));
      return {};
    case "clock_now":
      return { stamp: stamp(client(args).clock.now()) };
    case "clock_update": {
      const c = client(args);
      const s = args.stamp as { wall_time_ns?: unknown; logical?: unknown } | undefined;
      if (!s || typeof s.wall_time_ns !== "string" || typeof (s.logical ?? 0) !== "number") {
        throw new CommandError("bad_command", "argument stamp: want {wall_time_ns: decimal string, logical: number}");
      }
      c.clock.update(new Timestamp(BigInt(s.wall_time_ns), (s.logical as number | undefined) ?? 0));
      return {};
    }
    case "inspect": {
      const st = await client(args).inspect(str(args, "key"));
      if (!st) return { held: false };
      return {
        held: true,
        state: { fencing_token: st.fencingToken.toString(), holder: st.holder, stamp: stamp(st.stamp), waiters: st.waiters },
      };
    }
    case "close": {
      const id = str(args, "client");
      const c = client(args);
      clients.delete(id);
      await c.close();
      return {};
    }
  }
  throw new CommandError("unsupported", `unknown command ${JSON.stringify(cmd)}`);
}

async function closeAll(): Promise<void> {
  const all = [...clients.values()];
  clients.clear();
  await Promise.all(all.map((c) => c.close().catch(() => undefined)));
}

const inFlight = new Set<Promise<void>>();
let shuttingDown = false;

async function shutdown(id: number | undefined): Promise<void> {
  if (shuttingDown) return;
  shuttingDown = true;
  await closeAll();
  await Promise.allSettled([...inFlight]);
  if (id !== undefined) {
    process.stdout.write(JSON.stringify({ id, result: {} }) + "\n", () => process.exit(0));
  } else {
    process.exit(0);
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line.trim() === "" || shuttingDown) return;
  let req: Request;
  try {
    req = JSON.parse(line) as Request;
  } catch (e) {
    process.stderr.write(`conformance-runner: malformed command ${JSON.stringify(line)}: ${String(e)}\n`);
    process.exit(1);
  }
  const args = req.args ?? {};
  if (req.cmd === "close" && !args.client) {
    void shutdown(req.id);
    return;
  }
  // Each command runs on its own: a lock that waits on the server must not
  // hold up the unlock that frees it.
  const p = handle(req.cmd, args).then(
    (result) => { write({ id: req.id, result: result ?? {} }); },
    (err: unknown) => { write({ id: req.id, error: { kind: kindOf(err), message: err instanceof Error ? err.message : String(err) } }); },
  );
  inFlight.add(p);
  void p.finally(() => inFlight.delete(p));
});
lines.on("close", () => void shutdown(undefined));
