/**
 * A held lease and its watchdog (docs/promises.md, promise 5): renews at
 * TTL/3, poisons itself when a renewal is refused or when none succeeded by
 * the local expiry, and never throws at the caller asynchronously.
 */

import type { CallOptions } from "@connectrpc/connect";
import { exhausted, fromConnectError, isTransient } from "./connect-errors.js";
import { checkTtl, formatDuration, type Duration } from "./duration.js";
import { HoldfastError, InvalidArgumentError, LeaseLostError, LockReleasedError } from "./errors.js";
import type { Lease } from "./gen/holdfast/lock/v1/lock_pb.js";
import { Timestamp } from "./hlc.js";
import { shareOf } from "./primitives.js";
import type { RenewalRequest } from "./renewer.js";
import type { Session } from "./session.js";
import { CallSlot } from "./slot.js";
import type { GrantMode, Kind, LeaseLostReason } from "./types.js";
import { durationFromMs, monotonicNow, msFromDuration, newRequestId, unref } from "./util.js";

type GuardState = "held" | "lost" | "released";

/** The keys an Extend or Release of lease names: its key, or every key of a multi-key lease. */
export function leaseTarget(lease: Lease): { key: string } | { keys: string[] } {
  return lease.keys.length > 0 ? { keys: lease.keys.map((k) => k.key) } : { key: lease.key };
}

/**
 * A held lease: a lock, or one grant of a semaphore or rwlock (kind, limit,
 * permits and mode say which; a grant is a lease like a lock's, with its own
 * owner token). The client's watchdog renews it every TTL/3, together with
 * the client's other guards due about then (one ExtendBatch for all of them:
 * see renewer.ts), each with its own outcome. The guard is poisoned
 * when a renewal answers extended=false, or when no renewal has succeeded by
 * its local expiry: measured on this process's monotonic clock from the
 * moment the last successful renewal (or the acquire) was sent, minus the
 * client's expiry margin. Poisoned, its signal aborts with a LeaseLostError
 * and fencingToken(), extend() and unlock() throw it. Nothing is thrown at
 * the caller asynchronously.
 *
 * Supports `await using guard = await client.lock("k").acquire()` where the
 * runtime has Symbol.asyncDispose.
 */
export class Guard {
  /** The locked key (a multi-key lease's first key). */
  readonly key: string;
  /** Every locked key, in the order given to `client.lock()`. */
  readonly keys: readonly string[];
  /** The label others see while this guard holds the key. */
  readonly holder: string;
  /** What the key is: "mutex" (client.lock), "semaphore" (client.semaphore) or "rwlock" (client.rwlock). */
  readonly kind: Kind;
  /** The key's capacity: 1 for a lock, a semaphore's limit, an rwlock's reader capacity. */
  readonly limit: number;
  /** This lease's share of the limit: 1 for a lock and a reader, a semaphore grant's permits, the whole limit for a writer. */
  readonly permits: number;
  /** "shared" for an rwlock's reader, "exclusive" for everything else (a lock, a semaphore grant, a writer). */
  readonly mode: GrantMode;
  readonly #session: Session;
  readonly #ownerToken: string;
  readonly #fencingToken: bigint;
  /** The fencing token of each key of a multi-key lease; undefined for one key. */
  readonly #fences: ReadonlyMap<string, bigint> | undefined;
  /** What Extend and Release name: the key, or the keys of a multi-key lease. */
  readonly #target: { key: string } | { keys: string[] };
  readonly #stamp: Timestamp;
  /** Aborted when the guard stops holding (lost or released). */
  readonly #controller = new AbortController();
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
  /** The unlock() and close calls not finished yet (counted from the call on): an extend() waits for them. */
  #stopsPending = 0;
  /**
   * @internal One lease call at a time (slot.ts): a watchdog renewal or an
   * extend(), each applied before the next is sent.
   */
  readonly leaseCalls = new CallSlot();
  /** Whether the best-effort release after an unconfirmed loss was sent. */
  #tidied = false;
  /**
   * Whether a Release failed in transit (it may have reached the server):
   * a later released=false, in this unlock() or a later one, then does not
   * prove a loss.
   */
  #releaseInDoubt = false;
  /** An election leadership's value (proclaimValue replaces it); "" otherwise. */
  #value: string;

  private constructor(session: Session, lease: Lease, holder: string, validFrom: number, watchdog: boolean) {
    this.#session = session;
    this.holder = holder;
    this.#ownerToken = lease.ownerToken;
    this.#target = leaseTarget(lease);
    const first = lease.keys.at(0);
    if (first) {
      this.key = first.key;
      this.keys = Object.freeze(lease.keys.map((k) => k.key));
      this.#fencingToken = first.fencingToken;
      this.#fences = new Map(lease.keys.map((k) => [k.key, k.fencingToken]));
    } else {
      this.key = lease.key;
      this.keys = Object.freeze([lease.key]);
      this.#fencingToken = lease.fencingToken;
    }
    ({ kind: this.kind, limit: this.limit, permits: this.permits, mode: this.mode } = shareOf(lease));
    this.#stamp = Timestamp.fromProto(lease.stamp);
    this.#value = lease.value;
    this.#ttlMs = msFromDuration(lease.ttl);
    this.#validFrom = validFrom;
    session.open.add(this);
    this.#armExpiry();
    if (watchdog) session.renewer.add(this);
  }

  /** @internal The acquisition made a lease valid from validFrom (monotonic ms). */
  static start(session: Session, lease: Lease, holder: string, validFrom: number, watchdog: boolean): Guard {
    return new Guard(session, lease, holder, validFrom, watchdog);
  }

  /**
   * The fencing token of this lease: strictly larger than every earlier
   * holder's. Throws LeaseLostError once the lease is lost and
   * LockReleasedError once it was unlocked. A multi-key lease has a token
   * per key: use fencingTokenFor(key) (this throws InvalidArgumentError).
   */
  fencingToken(): bigint {
    if (this.#fences) {
      throw new InvalidArgumentError(
        `holdfast: fencing token: the lease holds ${this.keys.length} keys, each with its own fencing token: use fencingTokenFor(key)`,
      );
    }
    this.#throwIfNotHeld();
    return this.#fencingToken;
  }

  /**
   * The fencing token of key, one of the guard's keys. Throws as
   * fencingToken() once the guard no longer holds, and InvalidArgumentError
   * for a key that is not one of the lease's.
   */
  fencingTokenFor(key: string): bigint {
    this.#throwIfNotHeld();
    const token = this.#fences ? this.#fences.get(key) : key === this.key ? this.#fencingToken : undefined;
    if (token === undefined) {
      throw new InvalidArgumentError(`holdfast: fencing token: ${JSON.stringify(key)} is not a key of this lease (${JSON.stringify(this.keys)})`);
    }
    return token;
  }

  /** An election leadership's value: the campaign's, or the last proclaimed; "" for any other kind. */
  get value(): string {
    return this.#value;
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

  /** Milliseconds left to the local expiry (the lease's end on this client's clock, minus the expiry margin); 0 once lost. */
  remainingMs(): number {
    if (this.#state !== "held") return 0;
    return Math.max(0, this.#expiresAt() - monotonicNow());
  }

  /**
   * Renews the lease for ttl (default: its current TTL) from now, retrying
   * `unavailable` within the retry budget and the time left. Throws
   * LeaseLostError once the lease is lost, poisoning the guard (reason
   * "rejected") when the server answers extended=false, and
   * LockReleasedError after unlock(). A transport error leaves the guard
   * holding until its local expiry.
   *
   * One lease call of a guard at a time: extend() waits for a watchdog
   * renewal of the guard in flight to be answered and applied, and for an
   * extend() before it, so that its answer is applied last (the server saw
   * it last); an unlock() under way lets go of that renewal, and extend()
   * then waits for the unlock and throws LockReleasedError once it released.
   */
  async extend(ttl?: Duration): Promise<void> {
    this.#throwIfNotHeld();
    const wanted = ttl === undefined ? undefined : checkTtl(ttl);
    await this.leaseCalls.take();
    try {
      // An unlock() was called meanwhile (it lets go of the renewal this
      // waited for): an extend beside its Release could be answered either
      // way; after it, the guard is released, or still held if it failed.
      while (this.#stopsPending > 0) await this.#unlockChain;
      await this.#extendHolding(wanted ?? this.#ttlMs);
    } finally {
      this.leaseCalls.give();
    }
  }

  /** extend() holding the guard's lease-call slot: the TTL and the local expiry are those the last call left. */
  async #extendHolding(ttlMs: number): Promise<void> {
    this.#throwIfNotHeld();
    const what = `extend ${this.#what()}`;
    const settings = this.#session.settings;
    const deadline = Math.min(this.#expiresAt(), monotonicNow() + settings.retryBudgetMs);
    const requestId = newRequestId(); // the same on every attempt of this extend
    for (let attempt = 0; ; attempt++) {
      const sentAt = monotonicNow();
      try {
        if (await this.#extendOnce(ttlMs, sentAt, this.#session.callOptions(deadline - sentAt, this.#controller.signal), requestId)) {
          this.#session.renewer.reschedule(this);
          return;
        }
        break; // the guard ended meanwhile
      } catch (e) {
        this.#throwIfNotHeld();
        const err = fromConnectError(e, what);
        if (!isTransient(err)) throw err;
        if (!(await this.#session.backoffWithin(attempt, deadline))) {
          this.#throwIfNotHeld(); // past the local expiry: "expired"
          throw exhausted(err, what, formatDuration(settings.retryBudgetMs));
        }
      }
    }
    this.#throwIfNotHeld();
  }

  /**
   * @internal Leadership.proclaim: replaces an election leadership's value
   * if it still leads. proclaimed=false poisons the guard (reason
   * "rejected") and throws the LeaseLostError, as extended=false does;
   * unavailable is retried within the retry budget and the local expiry
   * (replacing a value twice is harmless).
   *
   * It takes the guard's lease-call slot, as extend() does and as the Go
   * SDK's Proclaim does: two proclaims are sent one after the other, so
   * the value kept is the one the server kept (answers of calls in flight
   * together could come back in either order).
   */
  async proclaimValue(value: string): Promise<void> {
    this.#throwIfNotHeld();
    if (this.kind !== "election") {
      throw new InvalidArgumentError(`holdfast: value: only an election's leadership takes a value (client.election); this is a ${this.kind}`);
    }
    await this.leaseCalls.take();
    try {
      // As in extend(): after an unlock() under way, its outcome decides.
      while (this.#stopsPending > 0) await this.#unlockChain;
      await this.#proclaimHolding(value);
    } finally {
      this.leaseCalls.give();
    }
  }

  /** proclaimValue() holding the guard's lease-call slot. */
  async #proclaimHolding(value: string): Promise<void> {
    this.#throwIfNotHeld();
    const session = this.#session;
    const what = `proclaim ${this.#what()}`;
    const deadline = Math.min(this.#expiresAt(), monotonicNow() + session.settings.retryBudgetMs);
    for (let attempt = 0; ; attempt++) {
      let res: Awaited<ReturnType<Session["rpc"]["proclaim"]>>;
      try {
        res = await session.rpc.proclaim(
          { key: this.key, ownerToken: this.#ownerToken, value, clientStamp: session.clock.now().toProto() },
          session.callOptions(deadline - monotonicNow(), this.#controller.signal),
        );
      } catch (e) {
        this.#throwIfNotHeld();
        const err = fromConnectError(e, what);
        if (!isTransient(err)) throw err;
        if (!(await session.backoffWithin(attempt, deadline))) {
          this.#throwIfNotHeld(); // past the local expiry: "expired"
          throw exhausted(err, what, formatDuration(session.settings.retryBudgetMs));
        }
        continue;
      }
      session.merge(res.serverStamp);
      session.merge(res.lease?.stamp);
      if (!res.proclaimed) this.#poison("rejected");
      // Proclaimed after the local expiry still finds the guard lost: the
      // work may have stopped, and the loss stands.
      this.#throwIfNotHeld();
      this.#value = value;
      return;
    }
  }

  /**
   * Stops the watchdog and releases the lease. Resolves only when the server
   * confirmed the release. When the lease was already lost, or the server
   * answers released=false, it rejects with the LeaseLostError (reason
   * "rejected", "expired", "client_closed" or "release_unconfirmed"): never
   * a quiet success. `unavailable` is retried with backoff within the retry
   * budget and the local expiry (after which the key frees itself and
   * unlock() reports the loss, reason "expired"); a budget that runs out
   * first rejects with the UnavailableError, and unlock() may be called
   * again. unlock() after a successful unlock() resolves (a no-op).
   */
  unlock(): Promise<void> {
    return this.#stopping(() => this.#unlockOnce());
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.unlock();
  }

  /** @internal Client.close: release if still held, else leave the loss as it is; the guard ends "client_closed" unless released. */
  closeForClient(budgetMs: number): Promise<void> {
    return this.#stopping(async () => {
      this.#session.renewer.remove(this);
      this.#checkExpiry();
      if (this.#state !== "held") return;
      try {
        await this.#release(monotonicNow() + budgetMs);
      } catch {
        // The loss below says it; the lease expires on the server by itself.
      }
      this.#poison("client_closed");
    });
  }

  /**
   * Queues fn (an unlock() or close) behind the one before, counted as
   * pending from this call on: an extend() that gets its slot meanwhile
   * (client.close lets go of the renewals before the guards' closes run)
   * waits for it rather than go beside its Release.
   */
  #stopping(fn: () => Promise<void>): Promise<void> {
    this.#stopsPending++;
    const p = this.#unlockChain.then(fn).finally(() => {
      this.#stopsPending--;
    });
    this.#unlockChain = p.catch(() => undefined);
    return p;
  }

  async #unlockOnce(): Promise<void> {
    this.#session.renewer.remove(this);
    this.#checkExpiry();
    if (this.#state === "released") return;
    const lost = this.#lostError;
    if (lost) {
      await this.#releaseAfterLoss();
      throw lost;
    }
    await this.#release(monotonicNow() + this.#session.settings.retryBudgetMs);
  }

  /**
   * Sends Release until the server answers, the deadline passes, or the
   * local expiry passes (a release after it is moot: the key frees itself).
   * Resolves once released; throws the LeaseLostError, or the last error
   * (the guard then still holds until its expiry).
   */
  async #release(deadline: number): Promise<void> {
    const session = this.#session;
    const what = `release ${this.#what()}`;
    // One request id for every attempt: a server that keeps request ids
    // answers a repeat of a release it did with released=true.
    const requestId = newRequestId();
    for (let attempt = 0; ; attempt++) {
      this.#throwIfNotHeld();
      const until = Math.min(deadline, this.#expiresAt());
      let res: Awaited<ReturnType<Session["rpc"]["release"]>>;
      try {
        res = await session.rpc.release(
          { ...this.#target, ownerToken: this.#ownerToken, clientStamp: session.clock.now().toProto(), requestId },
          session.callOptions(until - monotonicNow()),
        );
      } catch (e) {
        const err = fromConnectError(e, what);
        if (!isTransient(err)) throw err;
        this.#releaseInDoubt = true;
        this.#lastErr = err;
        if (!(await session.backoffWithin(attempt, Math.min(deadline, this.#expiresAt())))) {
          this.#throwIfNotHeld(); // past the local expiry: "expired"
          throw exhausted(err, what, formatDuration(session.settings.retryBudgetMs)); // the budget ran out first
        }
        continue;
      }
      {
        session.merge(res.serverStamp);
        if (res.released) {
          this.#finish("released", new LockReleasedError(this.key));
          session.emit({ type: "released", key: this.key, ...this.#eventKeys(), fencingToken: this.#fencingToken });
          // Released, but too late: the guard was already lost on the safe
          // clock (the work may have stopped), and that loss stands.
          if (this.#lostError) throw this.#lostError;
          return;
        }
        this.#poison(this.#releaseInDoubt ? "release_unconfirmed" : "rejected");
        this.#throwIfNotHeld();
        return;
      }
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
    const session = this.#session;
    try {
      const res = await session.rpc.release(
        { ...this.#target, ownerToken: this.#ownerToken, clientStamp: session.clock.now().toProto(), requestId: newRequestId() },
        session.callOptions(this.#ttlMs),
      );
      session.merge(res.serverStamp);
    } catch {
      // Best effort: the lease expires on the server by itself.
    }
  }

  // ---- watchdog ----

  /** The local expiry: the lease's end on this client's clock, less the expiry margin. */
  #expiresAt(): number {
    return this.#validFrom + this.#ttlMs - this.#session.settings.margin.marginMs(this.#ttlMs);
  }

  /** A multi-key lease's keys, for messages; one key as JSON. */
  #what(): string {
    return JSON.stringify(this.#fences ? this.keys : this.key);
  }

  /** The keys field of this guard's lease events: set for a multi-key lease. */
  #eventKeys(): { keys?: readonly string[] } {
    return this.#fences ? { keys: this.keys } : {};
  }

  /**
   * One Extend (requestId: the same on every attempt of one renewal); true
   * when it renewed the lease, false when the guard ended (poisoned on
   * extended=false).
   */
  async #extendOnce(ttlMs: number, sentAt: number, opts: CallOptions, requestId: string): Promise<boolean> {
    const session = this.#session;
    const res = await session.rpc.extend(
      { ...this.#target, ownerToken: this.#ownerToken, ttl: durationFromMs(ttlMs), clientStamp: session.clock.now().toProto(), requestId },
      opts,
    );
    session.merge(res.serverStamp);
    session.merge(res.lease?.stamp);
    return this.renewalAnswered(res.extended, res.lease, sentAt, ttlMs);
  }

  // ---- what the client's watchdog (renewer.ts) asks of the guard ----

  /** @internal What to renew the lease with, or undefined when the guard no longer holds. */
  renewalRequest(): RenewalRequest | undefined {
    this.#checkExpiry();
    if (this.#state !== "held") return undefined;
    return { target: this.#target, ownerToken: this.#ownerToken, ttlMs: this.#ttlMs, remainingMs: this.#expiresAt() - monotonicNow() };
  }

  /** @internal When the next renewal is due: a third of the TTL after the last successful one was sent. */
  renewalDue(): number {
    return this.#validFrom + this.#ttlMs / 3;
  }

  /**
   * @internal Applies a renewal's answer (a renewal sent at sentAt for
   * ttlMs): true when it renewed the lease, false when the guard ended
   * (poisoned on extended=false, or by an answer after the local expiry).
   */
  renewalAnswered(extended: boolean, lease: Lease | undefined, sentAt: number, ttlMs: number): boolean {
    if (this.#state !== "held") return false;
    if (!extended) {
      this.#poison("rejected");
      return false;
    }
    if (monotonicNow() >= this.#expiresAt()) {
      // The answer came after the local expiry: the guard was already lost
      // on the safe clock and the work may have stopped; the loss stands.
      this.#poison("expired", this.#lastErr);
      return false;
    }
    // The renewal counts from when it was sent, never from when it answered:
    // the server may have started the new TTL any time after sentAt.
    if (sentAt > this.#validFrom) this.#validFrom = sentAt;
    this.#ttlMs = lease ? msFromDuration(lease.ttl) || ttlMs : ttlMs;
    this.#lastErr = undefined;
    this.#renewals++;
    this.#armExpiry();
    this.#session.emit({
      type: "renewed",
      key: this.key,
      ...this.#eventKeys(),
      fencingToken: this.#fencingToken,
      ttlMs: this.#ttlMs,
      renewals: this.#renewals,
      latencyMs: monotonicNow() - sentAt,
    });
    return true;
  }

  /**
   * @internal A renewal got no answer for this lease. Any error short of
   * the server's extended=false must not drop a lease that is still valid:
   * the watchdog retries until it runs out (the expiry timer poisons the
   * guard then, "expired", with this error as the cause). Returns the time
   * left to the local expiry.
   */
  renewalFailed(err: HoldfastError): number {
    if (this.#state !== "held") return 0;
    this.#lastErr = err;
    const left = Math.max(0, this.#expiresAt() - monotonicNow());
    this.#session.emit({ type: "renewal_failed", key: this.key, ...this.#eventKeys(), fencingToken: this.#fencingToken, error: err, remainingMs: left });
    return left;
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
    const err = new LeaseLostError(this.key, reason, cause, this.#fencingToken, this.#fences ? this.keys : undefined);
    this.#lostError = err;
    this.#finish("lost", err);
    this.#session.emit({ type: "lost", key: this.key, ...this.#eventKeys(), fencingToken: this.#fencingToken, reason, error: err });
  }

  #finish(state: Exclude<GuardState, "held">, reason: HoldfastError): void {
    if (this.#state !== "held") return;
    this.#state = state;
    if (this.#expiryTimer !== undefined) clearTimeout(this.#expiryTimer);
    this.#session.renewer.remove(this);
    this.#session.open.delete(this);
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

/**
 * Runs fn under guard and releases it afterwards, also when fn throws. When
 * fn returns but the lease was lost meanwhile, rejects with the
 * LeaseLostError from unlock(); when fn throws, with fn's error.
 */
export async function runUnder<T>(guard: Guard, fn: (guard: Guard) => Promise<T> | T): Promise<T> {
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
