/**
 * The TypeScript SDK's adapter for holdfast's SDK-level conformance specs.
 *
 * It reads runner-protocol commands (JSON lines, one per line, see
 * conformance/sdkrunner/PROTOCOL.md) on stdin, performs each with this SDK's
 * public API (createClient and its options, the lock builder, Guard,
 * runIfFree) and writes one result per command, plus events, on stdout.
 * Logs go to stderr.
 *
 *   npm run build:conformance-runner
 *   holdfast-conformance sdk --runner "node build-conformance-runner/conformance-runner/main.js"
 *
 * 64-bit integers (fencing tokens, HLC wall times) travel as decimal
 * strings, so nothing is rounded to a double.
 */
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import {
  ClientClosedError,
  ClockOffsetError,
  HoldfastError,
  InvalidArgumentError,
  LeaseLostError,
  LockReleasedError,
  NotAcquiredError,
  PermissionDeniedError,
  StaleTokenError,
  Timestamp,
  UnauthenticatedError,
  UnavailableError,
  createClient,
  validateWrite,
  type Client,
  type Guard,
  type Leader,
  type Leadership,
  type LeaseEvent,
  type LockBuilder,
  type LockState,
  type Logger,
  type NodeClientOptions,
} from "../src/node.js";

const PROTOCOL_VERSION = 1;

type Args = Record<string, unknown>;

interface Request {
  id: number;
  cmd: string;
  args?: Args;
}

/** A command's failure, with the protocol's language-neutral kind. */
class CommandError extends Error {
  constructor(
    readonly kind: string,
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

const clients = new Map<string, Client>();
const guards = new Map<string, Guard>();
/** Fencing token -> guard id, so lease events name their guard. */
const guardIds = new Map<bigint, string>();
/** Commands in flight, by id, with the controller `cancel` aborts. */
const inFlight = new Map<number, { controller: AbortController; done: Promise<void> }>();
/** Leaderships won by campaign, by their guard's id. */
const leads = new Map<string, Leadership>();
/** observe commands in flight, by the suite's observe id: aborting ends the SDK's iteration. */
const observes = new Map<string, AbortController>();
/** run_if_free functions waiting for run_finish, by run name. */
const runs = new Map<string, () => void>();
/** Aborts what the adapter itself waits on (run_if_free functions) at shutdown. */
const shutdownSignal = new AbortController();
let seq = 0;

function write(msg: unknown): void {
  process.stdout.write(JSON.stringify(msg) + "\n");
}

/** Logs of the SDK go to stderr: stdout is the protocol's. */
const stderrLogger: Logger = {
  debug: () => undefined,
  info: (m, f) => {
    console.error(`[info] ${m}`, f ?? "");
  },
  warn: (m, f) => {
    console.error(`[warn] ${m}`, f ?? "");
  },
  error: (m, f) => {
    console.error(`[error] ${m}`, f ?? "");
  },
};

// ---- arguments ----

function str(args: Args, name: string): string {
  const v = args[name];
  if (typeof v !== "string" || v === "") throw new CommandError("bad_command", `argument ${name}: want a non-empty string`);
  return v;
}

function optStr(args: Args, name: string): string | undefined {
  const v = args[name];
  if (v === undefined || v === null || v === "") return undefined;
  if (typeof v !== "string") throw new CommandError("bad_command", `argument ${name}: want a string`);
  return v;
}

function optNum(args: Args, name: string): number | undefined {
  const v = args[name];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number") throw new CommandError("bad_command", `argument ${name}: want a number`);
  return v;
}

function u64(args: Args, name: string): bigint {
  const v = args[name];
  if (typeof v !== "string" || !/^[0-9]+$/.test(v)) throw new CommandError("bad_command", `argument ${name}: want a decimal string`);
  return BigInt(v);
}

function client(args: Args): Client {
  const id = str(args, "client");
  const c = clients.get(id);
  if (!c) throw new CommandError("bad_command", `unknown client ${JSON.stringify(id)}`);
  return c;
}

function guard(args: Args): Guard {
  const id = str(args, "guard");
  const g = guards.get(id);
  if (!g) throw new CommandError("bad_command", `unknown guard ${JSON.stringify(id)}`);
  return g;
}

/** The TTL: ttl_native passed as written (TypeScript's unit is the millisecond; "inf" is Infinity), else ttl_ms. */
function ttlOf(args: Args): number | undefined {
  const native = args.ttl_native;
  if (native !== undefined && native !== null) {
    if (native === "inf") return Infinity;
    if (typeof native !== "number") throw new CommandError("bad_command", 'ttl_native: want a number or "inf"');
    return native;
  }
  const ms = optNum(args, "ttl_ms");
  return ms === undefined || ms === 0 ? undefined : ms;
}

// ---- results ----

function stamp(t: Timestamp): { wall_time_ns: string; logical: number } {
  return { wall_time_ns: t.wallTimeNs.toString(), logical: t.logical };
}

function lockState(st: LockState): Record<string, unknown> {
  return {
    key: st.key,
    fencing_token: st.fencingToken.toString(),
    holder: st.holder,
    stamp: stamp(st.stamp),
    waiters: st.waiters,
    kind: st.kind,
    limit: st.limit,
    permits_in_use: st.permitsInUse,
    holders: st.holders.map((g) => ({
      fencing_token: g.fencingToken.toString(),
      holder: g.holder,
      permits: g.permits,
      mode: g.mode,
      stamp: stamp(g.stamp),
      ...(g.value === "" ? {} : { value: g.value }),
    })),
  };
}

function leader(l: Leader): Record<string, unknown> {
  return { key: l.key, term: l.term.toString(), holder: l.holder, value: l.value, stamp: stamp(l.stamp) };
}

function codeOf(err: unknown): string | undefined {
  if (err instanceof HoldfastError) return err.code;
  return err instanceof CommandError ? err.code : undefined;
}

function kindOf(err: unknown): string {
  if (err instanceof CommandError) return err.kind;
  if (err instanceof NotAcquiredError) return "not_acquired";
  if (err instanceof LeaseLostError) return "lease_lost";
  if (err instanceof LockReleasedError) return "released";
  if (err instanceof StaleTokenError) return "stale_token";
  if (err instanceof InvalidArgumentError || err instanceof ClockOffsetError) return "invalid_argument";
  if (err instanceof UnavailableError) return "unavailable";
  if (err instanceof UnauthenticatedError) return "unauthenticated";
  if (err instanceof PermissionDeniedError) return "permission_denied";
  if (err instanceof ClientClosedError) return "client_closed";
  return "internal";
}

/** The protocol's error object for what a command threw; `canceled` when it is the rejection of a cancel. */
function errorOf(err: unknown, cancelReason: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = {
    kind: err === cancelReason ? "canceled" : kindOf(err),
    message: err instanceof Error ? err.message : String(err),
  };
  const code = codeOf(err);
  if (code !== undefined) out.code = code;
  if (err instanceof LeaseLostError) {
    out.reason = err.reason;
    const causeCode = codeOf(err.cause);
    if (causeCode !== undefined) out.cause_code = causeCode;
  }
  if (err instanceof NotAcquiredError && err.current) out.current = lockState(err.current);
  return out;
}

function guardState(g: Guard): Record<string, unknown> {
  const base = { remaining_ms: g.remainingMs(), renewals: g.renewals };
  if (g.held) return { state: "held", ...base };
  const lost = g.lostError;
  if (lost) return { state: "lost", reason: lost.reason, ...base };
  return { state: "released", ...base };
}

// ---- SDK calls ----

function leaseEvent(e: LeaseEvent): void {
  const msg: Record<string, unknown> = { event: "lease_event", type: e.type, key: e.key, fencing_token: e.fencingToken.toString() };
  const id = guardIds.get(e.fencingToken);
  if (id !== undefined) msg.guard = id;
  switch (e.type) {
    case "renewed":
      msg.renewals = e.renewals;
      break;
    case "renewal_failed": {
      const code = codeOf(e.error);
      if (code !== undefined) msg.error_code = code;
      break;
    }
    case "lost": {
      msg.reason = e.reason;
      const code = codeOf(e.error.cause);
      if (code !== undefined) msg.error_code = code;
      break;
    }
    case "released":
      break;
  }
  write(msg);
}

/** connect's client options, each handed to the SDK's own option for it. */
function clientOptions(args: Args): NodeClientOptions {
  const protocol = optStr(args, "protocol") ?? "connect";
  if (protocol !== "connect" && protocol !== "grpc" && protocol !== "grpc-web") throw new CommandError("unsupported", `protocol ${protocol}`);
  const opts: NodeClientOptions = { protocol, logger: stderrLogger };
  const retryBudget = optNum(args, "retry_budget_ms");
  if (retryBudget !== undefined) opts.retryBudget = retryBudget;
  const requestTimeout = optNum(args, "request_timeout_ms");
  if (requestTimeout !== undefined) opts.requestTimeout = requestTimeout;
  const margin = args.expiry_margin as { drift_factor?: number; fixed_ms?: number } | undefined;
  if (margin) opts.expiryMargin = { driftFactor: margin.drift_factor ?? 0, fixed: margin.fixed_ms ?? 0 };
  if (args.lease_events === true) opts.onLeaseEvent = leaseEvent;
  const token = optStr(args, "bearer_token");
  if (token !== undefined) opts.bearerToken = token;
  if (args.headers) opts.headers = args.headers as Record<string, string>;
  const ca = optStr(args, "ca_file");
  const cert = optStr(args, "cert_file");
  const key = optStr(args, "key_file");
  if (ca !== undefined || cert !== undefined) {
    opts.tls = {
      ...(ca === undefined ? {} : { ca: readFileSync(ca) }),
      ...(cert === undefined ? {} : { cert: readFileSync(cert) }),
      ...(key === undefined ? {} : { key: readFileSync(key) }),
    };
  }
  return opts;
}

/** The builder of the command's kind: a lock, a semaphore (limit, and permits when given) or an rwlock share (mode). */
function kindBuilder(c: Client, key: string, args: Args): LockBuilder {
  const kind = optStr(args, "kind") ?? "mutex";
  let b: LockBuilder;
  switch (kind) {
    case "mutex":
      b = c.lock(key);
      break;
    case "semaphore":
      // Passed as is: the SDK must refuse a missing (0) or bad limit.
      b = c.semaphore(key, optNum(args, "limit") ?? 0);
      break;
    case "rwlock": {
      const mode = optStr(args, "mode");
      if (mode === "shared") b = c.rwlock(key).read();
      else if (mode === "exclusive") b = c.rwlock(key).write();
      else throw new CommandError("bad_command", `argument mode: want "shared" or "exclusive" for an rwlock, got ${JSON.stringify(mode)}`);
      break;
    }
    default:
      throw new CommandError("bad_command", `argument kind: want "mutex", "semaphore" or "rwlock", got ${JSON.stringify(kind)}`);
  }
  const permits = optNum(args, "permits");
  if (permits !== undefined) b.permits(permits);
  return b;
}

/** A builder for key with the command's kind, TTL, holder, and (unless unset) wait. */
function builder(c: Client, key: string, args: Args, signal: AbortSignal): LockBuilder {
  const b = kindBuilder(c, key, args).signal(signal);
  const ttl = ttlOf(args);
  if (ttl !== undefined) b.ttl(ttl);
  const holder = optStr(args, "holder");
  if (holder !== undefined) b.holder(holder);
  return b;
}

function track(g: Guard): string {
  const id = `g${++seq}`;
  guards.set(id, g);
  const token = g.fencingToken();
  guardIds.set(token, id);
  g.signal.addEventListener(
    "abort",
    () => {
      const why: unknown = g.signal.reason;
      if (why instanceof LeaseLostError) write({ event: "lease_lost", guard: id, reason: why.reason });
    },
    { once: true },
  );
  return id;
}

async function lock(args: Args, signal: AbortSignal): Promise<unknown> {
  const b = builder(client(args), str(args, "key"), args, signal);
  let g: Guard | undefined;
  if (args.try === true) {
    // Set on the builder anyway: tryAcquire must ignore it.
    const wait = optNum(args, "wait_ms");
    if (wait !== undefined) b.wait(wait);
    g = await b.tryAcquire();
    // tryAcquire answers undefined, not an error: the situation's code is not_acquired.
    if (!g) throw new CommandError("not_acquired", `lock ${JSON.stringify(args.key)} is held`, "not_acquired");
  } else {
    if (args.wait_unset !== true) b.wait(optNum(args, "wait_ms") ?? 0);
    g = await b.acquire();
  }
  const id = track(g);
  // What the guard says it holds, never echoed from the arguments.
  return { guard: id, fencing_token: g.fencingToken().toString(), stamp: stamp(g.stamp), kind: g.kind, limit: g.limit, permits: g.permits, mode: g.mode };
}

/** lock_many: a guard on every key, all acquired at once (one attempt each). */
async function lockMany(args: Args, signal: AbortSignal): Promise<unknown> {
  const c = client(args);
  const keys = args.keys;
  if (!Array.isArray(keys) || !keys.every((k) => typeof k === "string" && k !== "")) {
    throw new CommandError("bad_command", "argument keys: want a list of non-empty strings");
  }
  const got = await Promise.allSettled(
    (keys as string[]).map((k) => {
      const b = builder(c, k, args, signal);
      b.wait(0);
      return b.acquire();
    }),
  );
  const failed = got.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) {
    for (const r of got) if (r.status === "fulfilled") await r.value.unlock().catch(() => undefined);
    throw failed.reason;
  }
  return {
    guards: got.map((r) => {
      const g = (r as PromiseFulfilledResult<Guard>).value;
      return { guard: track(g), fencing_token: g.fencingToken().toString(), stamp: stamp(g.stamp) };
    }),
  };
}

async function runIfFree(args: Args, signal: AbortSignal): Promise<unknown> {
  const run = str(args, "run");
  const b = builder(client(args), str(args, "key"), args, signal);
  const wait = optNum(args, "wait_ms");
  if (wait !== undefined && wait !== 0) b.wait(wait); // runIfFree must ignore it
  const finished = new Promise<void>((resolve) => {
    runs.set(run, resolve);
    shutdownSignal.signal.addEventListener("abort", () => {
      resolve();
    });
  });
  try {
    const r = await b.runIfFree(async (g) => {
      const token = g.fencingToken().toString();
      write({ event: "run_started", run, fencing_token: token });
      await finished;
      return token;
    });
    return r.ran ? { ran: true, value: r.value } : { ran: false };
  } finally {
    runs.delete(run);
  }
}

function leadership(args: Args): Leadership {
  const id = str(args, "guard");
  const l = leads.get(id);
  if (!l) throw new CommandError("bad_command", `unknown leadership ${JSON.stringify(id)} (guards of campaign only)`);
  return l;
}

async function campaign(args: Args, signal: AbortSignal): Promise<unknown> {
  const e = client(args).election(str(args, "key")).signal(signal);
  const ttl = ttlOf(args);
  if (ttl !== undefined) e.ttl(ttl);
  const holder = optStr(args, "holder");
  if (holder !== undefined) e.holder(holder);
  if (args.wait_unset !== true) e.wait(optNum(args, "wait_ms") ?? 0);
  const value = args.value ?? "";
  if (typeof value !== "string") throw new CommandError("bad_command", "argument value: want a string");
  const lead = await e.campaign(value);
  const id = track(lead.guard);
  leads.set(id, lead);
  const g = lead.guard;
  return {
    guard: id,
    fencing_token: g.fencingToken().toString(),
    stamp: stamp(lead.stamp),
    kind: g.kind,
    limit: g.limit,
    permits: g.permits,
    mode: g.mode,
    term: lead.term().toString(),
    value: lead.value,
  };
}

/** observe: every message of the SDK's observe() as an observed event, until observe_stop (or cancel). */
async function observe(args: Args, signal: AbortSignal): Promise<unknown> {
  const name = str(args, "observe");
  if (observes.has(name)) throw new CommandError("bad_command", `observe ${JSON.stringify(name)} is already running`);
  const stop = new AbortController();
  observes.set(name, stop);
  let messages = 0;
  try {
    for await (const o of client(args).election(str(args, "key")).observe({ signal: AbortSignal.any([signal, stop.signal]) })) {
      messages++;
      write({ event: "observed", observe: name, ...(o.leader ? { leader: leader(o.leader) } : {}) });
    }
  } finally {
    observes.delete(name);
  }
  signal.throwIfAborted(); // cancelled by the suite, not stopped
  return { messages };
}

async function handle(cmd: string, args: Args, signal: AbortSignal): Promise<unknown> {
  switch (cmd) {
    case "hello":
      return {
        protocol_version: PROTOCOL_VERSION,
        sdk: "typescript",
        version: `@holdfast/sdk (this source tree), node ${process.version}`,
        capabilities: ["protocol:connect", "protocol:grpc", "protocol:grpc-web", "clock_update", "event:lease_lost", "request_ids", "semaphore", "rwlock", "election"],
        duration_unit: "ms",
      };
    case "connect": {
      const c = createClient(str(args, "addr"), clientOptions(args));
      const id = `c${++seq}`;
      clients.set(id, c);
      return { client: id };
    }
    case "lock":
      return lock(args, signal);
    case "lock_many":
      return lockMany(args, signal);
    case "unlock":
      // The SDK's own semantics: a lost lease rejects with LeaseLostError,
      // a second unlock after a successful one is a no-op.
      await guard(args).unlock();
      return {};
    case "extend":
      await guard(args).extend(ttlOf(args));
      return {};
    case "fencing_token":
      return { fencing_token: guard(args).fencingToken().toString() };
    case "guard_state":
      return guardState(guard(args));
    case "run_if_free":
      return runIfFree(args, signal);
    case "campaign":
      return campaign(args, signal);
    case "proclaim": {
      const value = args.value ?? "";
      if (typeof value !== "string") throw new CommandError("bad_command", "argument value: want a string");
      await leadership(args).proclaim(value);
      return {};
    }
    case "resign":
      await leadership(args).resign();
      return {};
    case "leader": {
      const l = await client(args).election(str(args, "key")).leader();
      return l ? { leader: leader(l) } : {};
    }
    case "observe":
      return observe(args, signal);
    case "observe_stop": {
      const name = str(args, "observe");
      const stop = observes.get(name);
      if (!stop) throw new CommandError("bad_command", `unknown observe ${JSON.stringify(name)} (none running under that name)`);
      stop.abort();
      return {};
    }
    case "run_finish": {
      const run = str(args, "run");
      const finish = runs.get(run);
      if (!finish) throw new CommandError("bad_command", `unknown run ${JSON.stringify(run)} (no run_if_free function waits under that name)`);
      runs.delete(run);
      finish();
      return {};
    }
    case "validate_write":
      return { watermark: validateWrite(u64(args, "token"), u64(args, "watermark")).toString() };
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
      return st ? { held: true, state: lockState(st) } : { held: false };
    }
    case "list": {
      const locks: unknown[] = [];
      for await (const st of client(args).list(optStr(args, "prefix") ?? "")) locks.push(lockState(st));
      return { locks };
    }
    case "server_info": {
      const info = await client(args).serverInfo();
      return { version: info.version, backend: info.backend.name };
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

// ---- the loop ----

let shuttingDown = false;

async function shutdown(id: number | undefined): Promise<void> {
  if (shuttingDown) return;
  shuttingDown = true;
  shutdownSignal.abort();
  for (const o of observes.values()) o.abort();
  const all = [...clients.values()];
  clients.clear();
  await Promise.all(all.map((c) => c.close().catch(() => undefined)));
  await Promise.allSettled([...inFlight.values()].map((c) => c.done));
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
  if (req.cmd === "cancel") {
    // Answered at once, in order: the command it names may be waiting on the server.
    const target = inFlight.get(args.id as number);
    target?.controller.abort(new Error(`canceled by the suite (command ${String(args.id)})`));
    write({ id: req.id, result: {} });
    return;
  }
  // Each command runs on its own: a lock that waits on the server must not
  // hold up the unlock that frees it.
  const controller = new AbortController();
  const done = handle(req.cmd, args, controller.signal).then(
    (result) => {
      write({ id: req.id, result: result ?? {} });
    },
    (err: unknown) => {
      write({ id: req.id, error: errorOf(err, controller.signal.reason) });
    },
  );
  inFlight.set(req.id, { controller, done });
  void done.finally(() => inFlight.delete(req.id));
});
lines.on("close", () => void shutdown(undefined));
