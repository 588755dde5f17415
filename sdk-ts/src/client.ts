/**
 * The holdfast client: acquire leases, keep them with a watchdog, fence work
 * with their tokens. Transport-neutral: index.ts (browsers, fetch), node.ts
 * (Node's http) and connect.ts (your own Connect transport) create it.
 */

import { acquireLease, acquireOrThrow, keyDelayFromProto, lockStateFromProto } from "./acquire.js";
import { fromConnectError } from "./connect-errors.js";
import { Capability, EventType, Kind as PbKind, type BackendInfo as PbBackendInfo } from "./gen/holdfast/lock/v1/lock_pb.js";
import { Guard, runUnder } from "./guard.js";
import type { Clock } from "./hlc.js";
import { Timestamp } from "./hlc.js";
import { ElectionBuilder } from "./election.js";
import { LockBuilder, RWLock, type RunResult } from "./lock-builder.js";
import { kindFromProto } from "./primitives.js";
import { runScheduled, type ScheduledJob } from "./scheduled.js";
import type { AcquireOptions } from "./options.js";
import type { Session } from "./session.js";
import type { BackendInfo, Inspection, LockEvent, LockEventType, LockState, ServerInfo } from "./types.js";
import { msFromDuration } from "./util.js";

function backendInfoFromProto(p: PbBackendInfo | undefined): BackendInfo {
  return {
    name: p?.name ?? "",
    version: p?.version ?? "",
    shared: p?.shared ?? false,
    durable: p?.durable ?? false,
    ttlGranularityMs: msFromDuration(p?.ttlGranularity),
    minTtlMs: msFromDuration(p?.minTtl),
    maxTtlMs: msFromDuration(p?.maxTtl),
    fair: p?.fair ?? false,
    maxKeys: Math.max(p?.maxKeys ?? 1, 1),
    requestIds: p?.capabilities.includes(Capability.REQUEST_ID) ?? false,
    maxLockDelayMs: msFromDuration(p?.maxLockDelay),
    // A server from before kinds says nothing: it keeps locks only.
    kinds: [...new Set(["mutex" as const, ...(p?.kinds ?? []).filter((k) => k !== PbKind.UNSPECIFIED).map(kindFromProto)])],
    maxLimit: p?.maxLimit ?? 0,
    rwlockReaders: p?.rwlockReaders ?? 0,
  };
}

/** One key, or the keys of a multi-key lock. */
const keyList = (key: string | readonly string[]): readonly string[] => (typeof key === "string" ? [key] : key);

const eventTypes: Partial<Record<EventType, LockEventType>> = {
  [EventType.SYNCED]: "synced",
  [EventType.ACQUIRED]: "acquired",
  [EventType.RELEASED]: "released",
  [EventType.EXPIRED]: "expired",
  [EventType.PROCLAIMED]: "proclaimed",
};

/**
 * A holdfast client. Create one per process with createClient() and share it.
 */
export class Client {
  readonly #session: Session;

  private constructor(session: Session) {
    this.#session = session;
  }

  /** @internal use createClient */
  static over(session: Session): Client {
    return new Client(session);
  }

  /** The client's Hybrid Logical Clock: ticked for every request, merged with every server stamp. */
  get clock(): Clock {
    return this.#session.clock;
  }

  /**
   * Starts building a lock on key: `client.lock("k").ttl("10s").wait("5s").acquire()`.
   * With more keys, `client.lock("accounts/1", "accounts/2")` takes them
   * together, all or none, in one atomic step of the server's backend,
   * under one lease with a fencing token per key (guard.fencingTokenFor(key)).
   * Waiting sets and single keys are served in arrival order, and
   * overlapping sets never deadlock. A multi-key lock needs a backend that
   * takes sets (`BackendInfo.maxKeys` > 1; else the server answers
   * `unimplemented`).
   */
  lock(key: string, ...more: string[]): LockBuilder {
    return LockBuilder.for(this.#session, [key, ...more]);
  }

  /**
   * Starts building a grant of the semaphore key, whose limit is the most
   * permits held at once: `client.semaphore("jobs/encode", 3).permits(2).ttl("30s").acquire()`
   * takes 2 of its 3 permits (permits default to 1). Each grant is a lease
   * of its own, with its own fencing token (strictly increasing over every
   * grant of the key), renewed by the watchdog and poisoned on loss like a
   * lock's; the same builder and Guard (guard.permits, guard.limit). The
   * server fixes a key's kind and limit at its first grant: asking with
   * another limit, or for a key used as a lock or rwlock, is refused with a
   * ServerError whose code is `failed_precondition`. limit must be at least
   * 1 (else InvalidArgumentError, before anything is sent); the server caps
   * it (`BackendInfo.maxLimit`). Waiters are served strictly in arrival
   * order, so a large request is never overtaken by later small ones.
   */
  semaphore(key: string, limit: number): LockBuilder {
    return LockBuilder.for(this.#session, [key], { kind: "semaphore", limit });
  }

  /**
   * Names the read-write lock key: `client.rwlock("cfg").read().acquire()`
   * takes a shared grant (with other readers, never a writer),
   * `.write().acquire()` an exclusive one. Grants are leases as locks are
   * (guard.mode says which). A key used as a lock or a semaphore is refused
   * with a ServerError whose code is `failed_precondition`.
   */
  rwlock(key: string): RWLock {
    return RWLock.for(this.#session, key);
  }

  /**
   * Describes campaigns for the leadership of key:
   * `const lead = await client.election("svc/primary").ttl("10s").campaign("10.0.0.7:8080")`
   * queues behind earlier campaigners until it leads. The Leadership is a
   * guard (the same watchdog, the same poisoning: run the leader's work
   * under `lead.signal`) whose fencing token is the leader's term
   * (`lead.term()`) and whose lease carries a value that `lead.proclaim(v)`
   * replaces; `lead.resign()` gives it up. `election.leader()` reads the
   * current leader, `election.observe()` streams every change. A key used as
   * another kind is refused with a ServerError whose code is
   * `failed_precondition`.
   */
  election(key: string): ElectionBuilder {
    return ElectionBuilder.for(this.#session, key);
  }

  /**
   * Takes the lease on key (or on every key of a list, together), queueing
   * on the server for options.wait (unset: until acquired or options.signal
   * aborts; 0: one attempt). Throws NotAcquiredError, with the holder's
   * state, when the key stayed held.
   */
  acquire(key: string | readonly string[], options: AcquireOptions = {}): Promise<Guard> {
    return acquireOrThrow(this.#session, keyList(key), options);
  }

  /** One attempt, never queueing (options.wait is ignored): the guard, or undefined when the key (a key of the list) is held. */
  async tryAcquire(key: string | readonly string[], options: AcquireOptions = {}): Promise<Guard | undefined> {
    const r = await acquireLease(this.#session, keyList(key), options, "try");
    return r instanceof Guard ? r : undefined;
  }

  /**
   * Runs fn while holding the lock on key (acquired as acquire() does) and
   * releases it afterwards, also when fn throws. fn receives the guard: pass
   * guard.signal to work that must stop when the lease is lost, and fence
   * writes with guard.fencingToken(). When fn returns but the lease was lost
   * meanwhile, withLock rejects with the LeaseLostError; when fn throws,
   * with fn's error.
   */
  async withLock<T>(key: string | readonly string[], options: AcquireOptions, fn: (guard: Guard) => Promise<T> | T): Promise<T> {
    return runUnder(await this.acquire(key, options), fn);
  }

  /**
   * A scheduled job that must run on one process at a time
   * (docs/recipes/scheduled-jobs.md): one attempt at job.key; held, the job
   * is skipped (`{ ran: false }`); free, job.run(signal, fencingToken) runs
   * under a lease longer than job.maxRuntime (default 1.5 ×), its signal
   * aborting at maxRuntime or when the lease is lost, and the lock is
   * released after it (`{ ran: true, value }`).
   */
  runScheduled<T>(job: ScheduledJob<T>): Promise<RunResult<T>> {
    return runScheduled(this.#session, job);
  }

  /** Who holds key (undefined when free), without its owner token. */
  async inspect(key: string): Promise<LockState | undefined> {
    const s = this.#session;
    s.checkOpen();
    const res = await s.retrying(`inspect ${JSON.stringify(key)}`, (opts) => s.rpc.inspect({ key }, opts));
    s.merge(res.serverStamp);
    return res.held ? lockStateFromProto(res.state) : undefined;
  }

  /**
   * inspect() that also reports a key nobody holds that is in its
   * lock-delay: `{ state }` when held, `{ delay }` when in its lock-delay,
   * neither when free.
   */
  async inspectDelay(key: string): Promise<Inspection> {
    const s = this.#session;
    s.checkOpen();
    const res = await s.retrying(`inspect ${JSON.stringify(key)}`, (opts) => s.rpc.inspect({ key }, opts));
    s.merge(res.serverStamp);
    if (res.held) return { state: lockStateFromProto(res.state), delay: undefined };
    return { state: undefined, delay: keyDelayFromProto(res.delayed) };
  }

  /** Every held lock whose key starts with prefix, in key order, page by page. */
  async *list(prefix = "", options: { pageSize?: number } = {}): AsyncGenerator<LockState> {
    const s = this.#session;
    s.checkOpen();
    let pageToken = "";
    do {
      const res = await s.retrying(`list ${JSON.stringify(prefix)}`, (opts) => s.rpc.list({ prefix, pageSize: options.pageSize ?? 0, pageToken }, opts));
      s.merge(res.serverStamp);
      for (const p of res.locks) {
        const state = lockStateFromProto(p);
        if (state) yield state;
      }
      pageToken = res.nextPageToken;
    } while (pageToken !== "");
  }

  /**
   * Streams acquisitions, releases and expiries of one key or of every key
   * under a prefix. The first event is "synced". Ends when signal aborts.
   */
  async *watch(target: { key: string } | { prefix: string }, options: { signal?: AbortSignal } = {}): AsyncGenerator<LockEvent> {
    const s = this.#session;
    s.checkOpen();
    const req = "key" in target ? { target: { case: "key" as const, value: target.key } } : { target: { case: "prefix" as const, value: target.prefix } };
    try {
      for await (const ev of s.rpc.watch(req, { signal: options.signal })) {
        s.merge(ev.serverStamp);
        yield {
          type: eventTypes[ev.type] ?? "synced",
          state: lockStateFromProto(ev.state),
          stamp: Timestamp.fromProto(ev.serverStamp),
        };
      }
    } catch (e) {
      if (options.signal?.aborted) return;
      throw fromConnectError(e, "watch");
    }
  }

  /** The server's version and its backend's promises. */
  async serverInfo(): Promise<ServerInfo> {
    const s = this.#session;
    s.checkOpen();
    const res = await s.retrying("server info", (opts) => s.rpc.getServerInfo({}, opts));
    s.merge(res.serverStamp);
    return {
      version: res.version,
      backend: backendInfoFromProto(res.backend),
      maxClockOffsetMs: msFromDuration(res.maxClockOffset),
      maxWaitMs: msFromDuration(res.maxWait),
      stamp: Timestamp.fromProto(res.serverStamp),
    };
  }

  /**
   * Closes the client: stops every guard's watchdog and releases the guards
   * still held (retrying `unavailable` within the retry budget). A guard
   * whose release was not confirmed ends lost with reason "client_closed";
   * its unlock() then rejects with that LeaseLostError. Further calls throw
   * ClientClosedError.
   */
  async close(): Promise<void> {
    const s = this.#session;
    if (s.closed) return;
    s.close();
    await Promise.all([...s.open].map((g) => g.closeForClient(s.settings.retryBudgetMs)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
