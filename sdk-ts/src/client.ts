/**
 * The holdfast client: acquire leases, keep them with a watchdog, fence work
 * with their tokens. Transport-neutral: index.ts (browsers, fetch) and node.ts
 * (Node's http) pick the Connect transport.
 */

import { createClient as createConnectClient, type CallOptions, type Client as ConnectClient, type Transport } from "@connectrpc/connect";
import {
  EventType,
  LockService,
  type AcquireResponse,
  type BackendInfo as PbBackendInfo,
  type Lease,
  type LockState as PbLockState,
} from "./gen/holdfast/lock/v1/lock_pb.js";
import { Clock, ClockOffsetError, Timestamp } from "./hlc.js";
import {
  CanceledError,
  ClientClosedError,
  DeadlineExceededError,
  HoldfastError,
  InvalidArgumentError,
  LeaseLostError,
  LockReleasedError,
  NotAcquiredError,
  fromConnectError,
  isRetryable,
  type LeaseLostReason,
  type LockState,
} from "./errors.js";
import { backoff, dateFromTimestamp, durationFromMs, monotonicNow, msFromDuration, sleep, unref } from "./util.js";

/** Options of createClient. */
export interface ClientOptions {
  /** Connect transport; overrides `protocol`. */
  transport?: Transport;
  /** Wire protocol of the default transport: "connect" (default), "grpc-web", or (Node only) "grpc". */
  protocol?: "connect" | "grpc-web" | "grpc";
  /** Label shown to others while this client holds a lock (default: a host/pid label in Node). */
  holder?: string;
  /** Lease length when a call gives none, in ms (default 15000). */
  defaultTtlMs?: number;
  /** How long calls other than acquire retry on `unavailable`, in ms (default 2000). */
  retryBudgetMs?: number;
  /** Per-request timeout added to acquire's wait, and used for other calls, in ms (default 10000). */
  requestTimeoutMs?: number;
  /** HLC max offset in ms: server stamps further ahead are not merged (default 500). */
  maxClockOffsetMs?: number;
  /** The HLC this client ticks and merges into (default: a new one). */
  clock?: Clock;
}

/** Options of one acquisition. */
export interface AcquireOptions {
  /** Lease length in ms (default: the client's defaultTtlMs). */
  ttlMs?: number;
  /** How long to queue for the lock on the server, in ms; 0 (default) tries once. Retries on `unavailable` happen within this budget. */
  waitMs?: number;
  /** Label shown to others (default: the client's holder). */
  holder?: string;
  /** Keep the lease alive by renewing it at about TTL/3 (default true). */
  watchdog?: boolean;
  /** Abort the acquisition (a guard already granted is not affected). */
  signal?: AbortSignal;
}

/** What the server's backend promises. */
export interface BackendInfo {
  name: string;
  version: string;
  /** True when several servers see the same locks. */
  shared: boolean;
  /** True when locks survive a restart of the backend. */
  durable: boolean;
  ttlGranularityMs: number;
  minTtlMs: number;
  maxTtlMs: number;
  fair: boolean;
}

export interface ServerInfo {
  version: string;
  backend: BackendInfo;
  maxClockOffsetMs: number;
  stamp: Timestamp;
}

export type LockEventType = "synced" | "acquired" | "released" | "expired";

export interface LockEvent {
  type: LockEventType;
  /** The lock the event is about; undefined for "synced". */
  state: LockState | undefined;
  stamp: Timestamp;
}

const DEFAULT_TTL_MS = 15_000;
const DEFAULT_RETRY_BUDGET_MS = 2_000;
const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;

function defaultHolder(): string {
  const proc = (globalThis as { process?: { pid?: number } }).process;
  return proc?.pid !== undefined ? `node pid ${proc.pid}` : "browser";
}

function lockStateFromProto(p: PbLockState | undefined): LockState | undefined {
  if (!p) return undefined;
  return {
    key: p.key,
    fencingToken: p.fencingToken,
    holder: p.holder,
    expiresAt: dateFromTimestamp(p.expiresAt),
    stamp: Timestamp.fromProto(p.stamp),
    waiters: p.waiters,
  };
}

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
  };
}

const eventTypes: Record<number, LockEventType> = {
  [EventType.SYNCED]: "synced",
  [EventType.ACQUIRED]: "acquired",
  [EventType.RELEASED]: "released",
  [EventType.EXPIRED]: "expired",
};

function checkMs(field: string, v: number, min: number): void {
  if (!Number.isFinite(v) || v < min) {
    throw new InvalidArgumentError(`holdfast: ${field}: ${v} must be a finite number of milliseconds >= ${min}`);
  }
}

/** Error to throw when the caller's signal ended a call. */
function abortError(signal: AbortSignal | undefined, what: string): HoldfastError | undefined {
  if (!signal?.aborted) return undefined;
  return new CanceledError(`holdfast: ${what}: aborted`, { cause: signal.reason, code: "canceled" });
}

/**
 * A holdfast client. Create one per process with createClient() and share it.
 */
export class Client {
  /** The client's Hybrid Logical Clock: ticked for every request, merged with every server stamp. */
  readonly clock: Clock;
  readonly #rpc: ConnectClient<typeof LockService>;
  readonly #holder: string;
  readonly #defaultTtlMs: number;
  readonly #retryBudgetMs: number;
  readonly #requestTimeoutMs: number;
  readonly #guards = new Set<Guard>();
  #closed = false;

  constructor(transport: Transport, options: ClientOptions = {}) {
    this.#rpc = createConnectClient(LockService, transport);
    this.clock = options.clock ?? new Clock({ maxOffsetMs: options.maxClockOffsetMs });
    this.#holder = options.holder ?? defaultHolder();
    this.#defaultTtlMs = options.defaultTtlMs ?? DEFAULT_TTL_MS;
    this.#retryBudgetMs = options.retryBudgetMs ?? DEFAULT_RETRY_BUDGET_MS;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  }

  /** Starts building a lock on key: `client.lock("k").ttl(10_000).wait(5_000).acquire()`. */
  lock(key: string): LockBuilder {
    return new LockBuilder(this, key);
  }

  /**
   * Takes the lease on key, queueing on the server for up to waitMs.
   * Throws NotAcquiredError when the key stayed held.
   */
  async acquire(key: string, options: AcquireOptions = {}): Promise<Guard> {
    const guard = await this.tryAcquire(key, options);
    if (guard instanceof Guard) return guard;
    throw new NotAcquiredError(key, guard.current);
  }

  /**
   * Like acquire, but contention is an answer, not an error: resolves to the
   * guard or to `{ current }` describing the holder.
   */
  async tryAcquire(key: string, options: AcquireOptions = {}): Promise<Guard | { current: LockState | undefined }> {
    this.#checkOpen();
    const ttlMs = options.ttlMs ?? this.#defaultTtlMs;
    const waitMs = options.waitMs ?? 0;
    checkMs("ttl", ttlMs, 1);
    checkMs("wait", waitMs, 0);
    const deadline = monotonicNow() + waitMs;
    for (let attempt = 0; ; attempt++) {
      const sentAt = monotonicNow();
      const remainingWait = Math.max(0, deadline - sentAt);
      let res: AcquireResponse;
      try {
        res = await this.#rpc.acquire(
          {
            key,
            ttl: durationFromMs(ttlMs),
            wait: remainingWait > 0 ? durationFromMs(remainingWait) : undefined,
            holder: options.holder ?? this.#holder,
            clientStamp: this.clock.now().toProto(),
          },
          this.#callOptions(remainingWait + this.#requestTimeoutMs, options.signal),
        );
      } catch (e) {
        const err = abortError(options.signal, "acquire") ?? fromConnectError(e, `acquire ${JSON.stringify(key)}`);
        // An acquire that failed in flight has an unknown outcome; if the
        // server did grant it, nobody renews that lease and it expires.
        const pause = backoff(attempt);
        if (isRetryable(err) && monotonicNow() + pause < deadline) {
          if (await sleep(pause, options.signal)) continue;
          throw abortError(options.signal, "acquire") ?? err;
        }
        throw err;
      }
      this.#merge(res.serverStamp);
      if (!res.acquired || !res.lease) {
        return { current: lockStateFromProto(res.current) };
      }
      this.#merge(res.lease.stamp);
      const validFrom = await this.#confirm(res.lease, sentAt);
      if (validFrom === undefined) return { current: undefined };
      return new Guard(this, res.lease, validFrom, options.watchdog ?? true);
    }
  }

  /**
   * A lease whose Acquire answer came late (after a server-side wait) started
   * on the server somewhere between sentAt and now: counting from sentAt,
   * little or none of it may be left. One Extend sent now establishes a fresh
   * local expiry. Resolves to the moment the lease is valid from, or to
   * undefined when it was lost before use.
   */
  async #confirm(lease: Lease, sentAt: number): Promise<number | undefined> {
    const ttlMs = msFromDuration(lease.ttl);
    if (monotonicNow() - sentAt < ttlMs / 3) return sentAt;
    const now = monotonicNow();
    try {
      const res = await this.#rpc.extend(
        { key: lease.key, ownerToken: lease.ownerToken, ttl: lease.ttl, clientStamp: this.clock.now().toProto() },
        this.#callOptions(this.#requestTimeoutMs),
      );
      this.#merge(res.serverStamp);
      if (!res.extended) return undefined;
      this.#merge(res.lease?.stamp);
      return now;
    } catch (e) {
      // Still valid on the safe clock: hand it out, the watchdog renews at once.
      if (monotonicNow() < sentAt + ttlMs) return sentAt;
      throw fromConnectError(e, `acquire ${JSON.stringify(lease.key)}`);
    }
  }

  /**
   * Runs fn while holding the lock on key and releases it afterwards, also
   * when fn throws. fn receives the guard: pass guard.signal to work that
   * must stop when the lease is lost, and fence writes with guard.fencingToken().
   * When fn returns but the lease was lost meanwhile, withLock rejects with
   * the LeaseLostError from unlock(); when fn throws, with fn's error.
   */
  async withLock<T>(key: string, options: AcquireOptions, fn: (guard: Guard) => Promise<T> | T): Promise<T> {
    const guard = await this.acquire(key, options);
    let result: T;
    try {
      result = await fn(guard);
    } catch (e) {
      // fn's error is the story; the release is still attempted.
      await guard.unlock().catch(() => undefined);
      throw e;
    }
    // A lease lost under fn rejects here (LeaseLostError): never a quiet success.
    await guard.unlock();
    return result;
  }

  /** Who holds key (undefined when free), without its owner token. */
  async inspect(key: string): Promise<LockState | undefined> {
    this.#checkOpen();
    const res = await this.#retrying(`inspect ${JSON.stringify(key)}`, (opts) => this.#rpc.inspect({ key }, opts));
    this.#merge(res.serverStamp);
    return res.held ? lockStateFromProto(res.state) : undefined;
  }

  /** Every held lock whose key starts with prefix, in key order, page by page. */
  async *list(prefix = "", options: { pageSize?: number } = {}): AsyncGenerator<LockState> {
    this.#checkOpen();
    let pageToken = "";
    do {
      const res = await this.#retrying(`list ${JSON.stringify(prefix)}`, (opts) =>
        this.#rpc.list({ prefix, pageSize: options.pageSize ?? 0, pageToken }, opts),
      );
      this.#merge(res.serverStamp);
      for (const s of res.locks) {
        const state = lockStateFromProto(s);
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
    this.#checkOpen();
    const req = "key" in target ? { target: { case: "key" as const, value: target.key } } : { target: { case: "prefix" as const, value: target.prefix } };
    try {
      for await (const ev of this.#rpc.watch(req, { signal: options.signal })) {
        this.#merge(ev.serverStamp);
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
    this.#checkOpen();
    const res = await this.#retrying("server info", (opts) => this.#rpc.getServerInfo({}, opts));
    this.#merge(res.serverStamp);
    return {
      version: res.version,
      backend: backendInfoFromProto(res.backend),
      maxClockOffsetMs: msFromDuration(res.maxClockOffset),
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
    if (this.#closed) return;
    this.#closed = true;
    const guards = [...this.#guards];
    await Promise.all(guards.map((g) => g.closeForClient(this.#retryBudgetMs)));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---- internals shared with Guard ----

  /** @internal */
  get rpc(): ConnectClient<typeof LockService> {
    return this.#rpc;
  }

  /** @internal */
  get requestTimeoutMs(): number {
    return this.#requestTimeoutMs;
  }

  /** @internal */
  get retryBudgetMs(): number {
    return this.#retryBudgetMs;
  }

  /** @internal */
  track(g: Guard, held: boolean): void {
    if (held) this.#guards.add(g);
    else this.#guards.delete(g);
  }

  /**
   * @internal Merges a server stamp into the clock. A stamp further ahead than
   * the max offset is not merged: adopting it would make this client's next
   * stamps look too far ahead to every other server.
   */
  merge(p: Parameters<typeof Timestamp.fromProto>[0]): void {
    this.#merge(p);
  }

  #merge(p: Parameters<typeof Timestamp.fromProto>[0]): void {
    const ts = Timestamp.fromProto(p);
    if (ts.isZero()) return;
    try {
      this.clock.update(ts);
    } catch (e) {
      if (!(e instanceof ClockOffsetError)) throw e;
    }
  }

  #checkOpen(): void {
    if (this.#closed) throw new ClientClosedError();
  }

  #callOptions(timeoutMs: number, signal?: AbortSignal): CallOptions {
    return { timeoutMs: Math.max(1, Math.ceil(timeoutMs)), signal };
  }

  /** @internal Runs a call, retrying on `unavailable` within the retry budget. */
  async retrying<T>(what: string, call: (opts: CallOptions) => Promise<T>, budgetMs = this.#retryBudgetMs): Promise<T> {
    return this.#retrying(what, call, budgetMs);
  }

  async #retrying<T>(what: string, call: (opts: CallOptions) => Promise<T>, budgetMs = this.#retryBudgetMs): Promise<T> {
    const deadline = monotonicNow() + budgetMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await call(this.#callOptions(this.#requestTimeoutMs));
      } catch (e) {
        const err = fromConnectError(e, what);
        const pause = backoff(attempt);
        if (isRetryable(err) && monotonicNow() + pause < deadline) {
          await sleep(pause);
          continue;
        }
        throw err;
      }
    }
  }
}

/** Fluent builder for one acquisition: client.lock(key).ttl(ms).wait(ms).acquire(). */
export class LockBuilder {
  readonly #opts: AcquireOptions = {};
  constructor(
    readonly client: Client,
    readonly key: string,
  ) {}

  /** Lease length in ms. */
  ttl(ms: number): this {
    this.#opts.ttlMs = ms;
    return this;
  }
  /** Queue on the server for up to ms (0 tries once). */
  wait(ms: number): this {
    this.#opts.waitMs = ms;
    return this;
  }
  holder(label: string): this {
    this.#opts.holder = label;
    return this;
  }
  /** Turn the renewing watchdog off (the guard is then poisoned at the lease's expiry). */
  noWatchdog(): this {
    this.#opts.watchdog = false;
    return this;
  }
  signal(signal: AbortSignal): this {
    this.#opts.signal = signal;
    return this;
  }
  /** Takes the lock or throws NotAcquiredError. */
  acquire(): Promise<Guard> {
    return this.client.acquire(this.key, { ...this.#opts });
  }
  /** Takes the lock, or resolves to undefined when it is held. */
  async tryAcquire(): Promise<Guard | undefined> {
    const r = await this.client.tryAcquire(this.key, { ...this.#opts });
    return r instanceof Guard ? r : undefined;
  }
  /** Runs fn under the lock and releases it afterwards. */
  run<T>(fn: (guard: Guard) => Promise<T> | T): Promise<T> {
    return this.client.withLock(this.key, { ...this.#opts }, fn);
  }
}

type GuardState = "held" | "lost" | "released";

/**
 * A held lease. Its watchdog renews it at about TTL/3. The guard is poisoned
 * when a renewal answers extended=false, or when no renewal has succeeded by
 * the lease's expiry measured on this process's monotonic clock from the
 * moment the last successful renewal (or the acquire) was sent. Poisoned, its
 * signal aborts with a LeaseLostError and fencingToken(), extend() and
 * unlock() throw it. Nothing is thrown at the caller asynchronously.
 *
 * Supports `await using guard = await client.lock("k").acquire()` where the
 * runtime has Symbol.asyncDispose.
 */
export class Guard {
  readonly key: string;
  readonly #client: Client;
  readonly #ownerToken: string;
  readonly #fencingToken: bigint;
  readonly #stamp: Timestamp;
  /** Aborted when the guard stops holding (lost or released). */
  readonly #controller = new AbortController();
  /** Stops the watchdog's sleeps and in-flight renewals (unlock, close, the end of the guard). */
  readonly #stop = new AbortController();
  #state: GuardState = "held";
  #lostError: LeaseLostError | undefined;
  #ttlMs: number;
  /** Monotonic time at which the last successful renewal (or the acquire) was sent. */
  #validFrom: number;
  #expiryTimer: ReturnType<typeof setTimeout> | undefined;
  #renewals = 0;
  /** The last renewal error, reported as the cause of an "expired" loss. */
  #lastErr: unknown;
  /** Serialises unlock() and close: each waits for the one before. */
  #unlockChain: Promise<unknown> = Promise.resolve();
  /** Whether the best-effort release after an unconfirmed loss was sent. */
  #tidied = false;

  /** @internal use Client.acquire */
  constructor(client: Client, lease: Lease, sentAt: number, watchdog: boolean) {
    this.#client = client;
    this.key = lease.key;
    this.#ownerToken = lease.ownerToken;
    this.#fencingToken = lease.fencingToken;
    this.#stamp = Timestamp.fromProto(lease.stamp);
    this.#ttlMs = msFromDuration(lease.ttl);
    this.#validFrom = sentAt;
    client.track(this, true);
    this.#armExpiry();
    if (watchdog) void this.#watchdog();
  }

  /**
   * The fencing token of this lease: strictly larger than every earlier
   * holder's. Throws LeaseLostError once the lease is lost and
   * LockReleasedError once it was unlocked.
   */
  fencingToken(): bigint {
    this.#throwIfNotHeld();
    return this.#fencingToken;
  }

  /** HLC stamp of the acquisition. */
  get stamp(): Timestamp {
    return this.#stamp;
  }

  /** Aborted, with a LeaseLostError (or LockReleasedError) as its reason, when the guard stops holding. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** True while the guard believes it holds the lease. */
  get held(): boolean {
    this.#checkExpiry();
    return this.#state === "held";
  }

  /** Why the guard was poisoned, if it was. */
  get lostError(): LeaseLostError | undefined {
    return this.#lostError;
  }

  /** Current lease length in ms. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /** Number of successful renewals (watchdog and extend()). */
  get renewals(): number {
    return this.#renewals;
  }

  /** Milliseconds left on the lease by the client's monotonic clock (0 once lost). */
  remainingMs(): number {
    if (this.#state !== "held") return 0;
    return Math.max(0, this.#validFrom + this.#ttlMs - monotonicNow());
  }

  /**
   * Renews the lease for ttlMs (default: its current TTL) from now, retrying
   * `unavailable` within the lease's remaining time. Throws LeaseLostError
   * once the lease is lost, poisoning the guard (reason "rejected") when the
   * server answers extended=false, and LockReleasedError after unlock(). A
   * transport error leaves the guard holding until its local expiry.
   */
  async extend(ttlMs?: number): Promise<void> {
    this.#throwIfNotHeld();
    const ttl = ttlMs ?? this.#ttlMs;
    checkMs("ttl", ttl, 1);
    const sentAt = monotonicNow();
    const budget = Math.max(0, this.#validFrom + this.#ttlMs - sentAt);
    let extended: boolean;
    try {
      extended = await this.#client.retrying(
        `extend ${JSON.stringify(this.key)}`,
        (opts) => this.#extendOnce(ttl, sentAt, opts, this.#controller.signal),
        budget,
      );
    } catch (e) {
      this.#throwIfNotHeld();
      throw e;
    }
    if (!extended) {
      this.#throwIfNotHeld();
      // Not reached: #extendOnce answers false only after the guard ended.
      throw new LeaseLostError(this.key, "rejected", undefined, this.#fencingToken);
    }
  }

  /**
   * Stops the watchdog and releases the lease. Resolves only when the server
   * confirmed the release. When the lease was already lost, or the server
   * answers released=false, it rejects with the LeaseLostError (reason
   * "rejected", "expired", "client_closed" or "release_unconfirmed") — never
   * a quiet success (etcd#22082). `unavailable` is retried with backoff until
   * the lease's local expiry (after which the server frees the key by itself
   * and unlock() reports the loss, reason "expired"). unlock() after a
   * successful unlock() resolves (a no-op); after one that failed for another
   * reason (a non-retryable error) it may be called again.
   */
  unlock(): Promise<void> {
    const p = this.#unlockChain.then(() => this.#unlockOnce());
    this.#unlockChain = p.catch(() => undefined);
    return p;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.unlock();
  }

  /** @internal Client.close: release if still held, else leave the loss as it is; the guard ends "client_closed" unless released. */
  closeForClient(budgetMs: number): Promise<void> {
    const p = this.#unlockChain.then(async () => {
      this.#stop.abort(new ClientClosedError());
      this.#checkExpiry();
      if (this.#state !== "held") return;
      try {
        await this.#release(Math.min(this.#expiresAt(), monotonicNow() + budgetMs));
      } catch {
        // The loss below says it; the lease expires on the server by itself.
      }
      this.#poison("client_closed");
    });
    this.#unlockChain = p.catch(() => undefined);
    return p;
  }

  async #unlockOnce(): Promise<void> {
    this.#stop.abort(new LockReleasedError(this.key));
    this.#checkExpiry();
    if (this.#state === "released") return;
    if (this.#state === "lost") {
      await this.#releaseAfterLoss();
      throw this.#lostError!;
    }
    await this.#release(this.#expiresAt());
  }

  /**
   * Sends Release until the server answers, the deadline passes, or the
   * lease's local expiry passes (a release after it is moot: the key frees
   * itself). Resolves once released; throws the LeaseLostError, or a
   * non-retryable error (the guard then still holds until its expiry).
   */
  async #release(deadline: number): Promise<void> {
    // inDoubt: an earlier attempt failed in transit and may have reached
    // the server; a later released=false then does not prove a loss.
    let inDoubt = false;
    for (let attempt = 0; ; attempt++) {
      this.#throwIfNotHeld();
      const left = Math.min(deadline, this.#expiresAt()) - monotonicNow();
      let res: Awaited<ReturnType<Client["rpc"]["release"]>> | undefined;
      let err: HoldfastError | undefined;
      try {
        res = await this.#client.rpc.release(
          { key: this.key, ownerToken: this.#ownerToken, clientStamp: this.#client.clock.now().toProto() },
          { timeoutMs: Math.max(1, Math.ceil(Math.min(left, this.#client.requestTimeoutMs))) },
        );
      } catch (e) {
        err = fromConnectError(e, `release ${JSON.stringify(this.key)}`);
      }
      if (res) {
        this.#client.merge(res.serverStamp);
        if (res.released) {
          this.#finish("released", new LockReleasedError(this.key));
          // Released, but too late: the guard was already lost on the safe
          // clock (the work may have stopped), and that loss stands.
          if (this.#lostError) throw this.#lostError;
          return;
        }
        this.#poison(inDoubt ? "release_unconfirmed" : "rejected");
        this.#throwIfNotHeld();
        return;
      }
      if (!(isRetryable(err) || err instanceof DeadlineExceededError)) throw err;
      inDoubt = true;
      this.#lastErr = err;
      const wait = Math.min(backoff(attempt), Math.min(deadline, this.#expiresAt()) - monotonicNow());
      if (wait <= 0) {
        this.#throwIfNotHeld(); // past the local expiry: "expired"
        throw err; // the caller's deadline (close's budget) ran out first
      }
      await sleep(wait);
    }
  }

  /**
   * After a loss the server did not confirm ("expired"), the lease may still
   * be held on the server: one best-effort release frees the key for others
   * before its TTL. Compare-on-release makes it harmless if a successor holds.
   */
  async #releaseAfterLoss(): Promise<void> {
    if (this.#tidied || this.#lostError?.reason !== "expired") return;
    this.#tidied = true;
    try {
      const res = await this.#client.rpc.release(
        { key: this.key, ownerToken: this.#ownerToken, clientStamp: this.#client.clock.now().toProto() },
        { timeoutMs: Math.max(1, Math.ceil(Math.min(this.#ttlMs, this.#client.requestTimeoutMs))) },
      );
      this.#client.merge(res.serverStamp);
    } catch {
      // Best effort: the lease expires on the server by itself.
    }
  }

  // ---- watchdog ----

  #expiresAt(): number {
    return this.#validFrom + this.#ttlMs;
  }

  async #extendOnce(ttlMs: number, sentAt: number, opts: CallOptions, signal: AbortSignal): Promise<boolean> {
    const res = await this.#client.rpc.extend(
      {
        key: this.key,
        ownerToken: this.#ownerToken,
        ttl: durationFromMs(ttlMs),
        clientStamp: this.#client.clock.now().toProto(),
      },
      { ...opts, signal },
    );
    this.#client.merge(res.serverStamp);
    if (this.#state !== "held") return false;
    if (!res.extended) {
      this.#poison("rejected");
      return false;
    }
    if (monotonicNow() >= this.#expiresAt()) {
      // The answer came after the local expiry: the guard was already lost
      // on the safe clock and the work may have stopped; the loss stands.
      this.#poison("expired", this.#lastErr);
      return false;
    }
    this.#client.merge(res.lease?.stamp);
    // The renewal counts from when it was sent, never from when it answered:
    // the server may have started the new TTL any time after sentAt.
    if (sentAt > this.#validFrom) this.#validFrom = sentAt;
    this.#ttlMs = res.lease ? msFromDuration(res.lease.ttl) || ttlMs : ttlMs;
    this.#lastErr = undefined;
    this.#renewals++;
    this.#armExpiry();
    return true;
  }

  async #watchdog(): Promise<void> {
    const stop = this.#stop.signal;
    while (this.#state === "held" && !stop.aborted) {
      // Renew a third of the TTL after the last successful renewal was sent.
      if (!(await sleep(this.#validFrom + this.#ttlMs / 3 - monotonicNow(), stop, true))) return;
      for (let attempt = 0; this.#state === "held" && !stop.aborted; attempt++) {
        const sentAt = monotonicNow();
        const remaining = this.#expiresAt() - sentAt;
        if (remaining <= 0) {
          this.#poison("expired", this.#lastErr);
          return;
        }
        try {
          // A renewal that answers after the lease's expiry is useless: cap
          // each attempt at the time left, and at a third of the TTL so a
          // hung connection leaves time for another attempt.
          await this.#extendOnce(this.#ttlMs, sentAt, { timeoutMs: Math.max(1, Math.ceil(Math.min(remaining, this.#ttlMs / 3))) }, stop);
          break;
        } catch (e) {
          if (this.#state !== "held" || stop.aborted) return;
          // Any error short of the server's extended=false must not drop a
          // lease that is still valid (consul#912): retry until it runs out
          // (the expiry timer poisons the guard then, "expired", with this
          // error as the cause), as the Go SDK does.
          this.#lastErr = fromConnectError(e, `renew ${JSON.stringify(this.key)}`);
          const pause = Math.min(backoff(attempt, 50, Math.max(50, this.#ttlMs / 10)), Math.max(0, this.#expiresAt() - monotonicNow()));
          if (!(await sleep(pause, stop, true))) return;
        }
      }
    }
  }

  #armExpiry(): void {
    if (this.#expiryTimer !== undefined) clearTimeout(this.#expiryTimer);
    const left = this.#expiresAt() - monotonicNow();
    this.#expiryTimer = setTimeout(() => {
      // A renewal may have landed while the timer was queued.
      if (this.#state === "held" && monotonicNow() >= this.#expiresAt()) this.#poison("expired", this.#lastErr);
      else if (this.#state === "held") this.#armExpiry();
    }, Math.max(0, left));
    unref(this.#expiryTimer);
  }

  #poison(reason: LeaseLostReason, cause?: unknown): void {
    if (this.#state !== "held") return;
    const err = new LeaseLostError(this.key, reason, cause, this.#fencingToken);
    this.#lostError = err;
    this.#finish("lost", err);
  }

  #finish(state: Exclude<GuardState, "held">, reason: HoldfastError): void {
    if (this.#state !== "held") return;
    this.#state = state;
    if (this.#expiryTimer !== undefined) clearTimeout(this.#expiryTimer);
    this.#stop.abort(reason);
    this.#client.track(this, false);
    this.#controller.abort(reason);
  }

  /** Poisons the guard if the local expiry has passed (the expiry timer may not have run yet: a busy event loop). */
  #checkExpiry(): void {
    if (this.#state === "held" && monotonicNow() >= this.#expiresAt()) this.#poison("expired", this.#lastErr);
  }

  #throwIfNotHeld(): void {
    this.#checkExpiry();
    if (this.#state === "held") return;
    if (this.#lostError) throw this.#lostError;
    throw new LockReleasedError(this.key);
  }
}
