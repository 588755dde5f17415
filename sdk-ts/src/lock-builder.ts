/**
 * The fluent way to describe one acquisition: `client.lock(key).ttl("30s").wait("5s").acquire()`;
 * several keys, taken together (all or none) under one lease: `client.lock("accounts/1", "accounts/2")`;
 * permits of a semaphore, `client.semaphore("jobs", 3).permits(2)`, and a
 * share of a read-write lock, `client.rwlock("cfg").read()` / `.write()`:
 * the same builder and the same Guard (primitives.ts).
 */

import { acquireLease, acquireOrThrow } from "./acquire.js";
import type { Duration } from "./duration.js";
import { Guard, runUnder } from "./guard.js";
import type { AcquireOptions } from "./options.js";
import { LOCK, type Primitive } from "./primitives.js";
import type { Session } from "./session.js";
import type { Kind } from "./types.js";

/** What runIfFree answers: whether fn ran, and its value when it did. */
export type RunResult<T> = { ran: false } | { ran: true; value: T };

export class LockBuilder {
  /** The (first) key the lock is on. */
  readonly key: string;
  /** Every key the lock is on. */
  readonly keys: readonly string[];
  readonly #session: Session;
  readonly #opts: AcquireOptions = {};
  #primitive: Primitive;

  private constructor(session: Session, keys: readonly string[], primitive: Primitive) {
    this.#session = session;
    this.keys = Object.freeze([...keys]);
    this.key = keys[0] ?? "";
    this.#primitive = primitive;
  }

  /** @internal use Client.lock, Client.semaphore, Client.rwlock */
  static for(session: Session, keys: readonly string[], primitive: Primitive = LOCK): LockBuilder {
    return new LockBuilder(session, keys, primitive);
  }

  /** What the builder takes: "mutex" (a lock), "semaphore" or "rwlock". */
  get kind(): Kind {
    return this.#primitive.kind;
  }

  /**
   * How many of a semaphore's permits the grant takes: 1 (the default) to
   * the semaphore's limit. Only a semaphore takes permits: on a lock or an
   * rwlock, acquiring rejects with InvalidArgumentError (as does a count
   * out of range), before anything is sent.
   */
  permits(n: number): this {
    this.#primitive = { ...this.#primitive, permits: n };
    return this;
  }

  /** Lease length: milliseconds or a string such as "30s" (at least 100 ms; default the client's defaultTtl). */
  ttl(ttl: Duration): this {
    this.#opts.ttl = ttl;
    return this;
  }
  /** Queue on the server for at most this long; 0 makes one attempt. Unset, acquire() queues until acquired or aborted. */
  wait(wait: Duration): this {
    this.#opts.wait = wait;
    return this;
  }
  holder(label: string): this {
    this.#opts.holder = label;
    return this;
  }
  /** Turn the renewing watchdog off (the guard is then poisoned at its local expiry). */
  noWatchdog(): this {
    this.#opts.watchdog = false;
    return this;
  }
  /**
   * Lock-delay: if the lease expires (its holder stopped renewing it; not
   * when it is released), its keys refuse new holders for this long, so that
   * the stalled holder's writes in flight drain before the next holder
   * starts. Waiters wait through it. 0 (the default) is none; the server
   * caps it (`BackendInfo.maxLockDelayMs`, 1 minute by default).
   */
  lockDelay(delay: Duration): this {
    this.#opts.lockDelay = delay;
    return this;
  }
  /** Abort the acquisition with this signal: acquire() rejects with its reason and leaves the server's queue at once. */
  signal(signal: AbortSignal): this {
    this.#opts.signal = signal;
    return this;
  }

  /** Takes the lock, queueing as wait() says; throws NotAcquiredError when it stayed held. */
  acquire(): Promise<Guard> {
    return acquireOrThrow(this.#session, this.keys, { ...this.#opts }, this.#primitive);
  }

  /** One attempt, never queueing (wait() is ignored): the guard, or undefined when the key is held. */
  async tryAcquire(): Promise<Guard | undefined> {
    const r = await acquireLease(this.#session, this.keys, { ...this.#opts }, "try", this.#primitive);
    return r instanceof Guard ? r : undefined;
  }

  /**
   * Runs fn under the lock (acquired as acquire() does) and releases it
   * afterwards, also when fn throws. Rejects with the LeaseLostError when fn
   * returned but the lease was lost meanwhile.
   */
  run<T>(fn: (guard: Guard) => Promise<T> | T): Promise<T> {
    return this.acquire().then((g) => runUnder(g, fn));
  }

  /**
   * Skip if held: one attempt (as tryAcquire); when the key is held, fn is
   * not called and the answer is `{ ran: false }`. When free, fn runs under
   * the guard and the lock is released after it (as run), answering
   * `{ ran: true, value }`.
   */
  async runIfFree<T>(fn: (guard: Guard) => Promise<T> | T): Promise<RunResult<T>> {
    const guard = await this.tryAcquire();
    if (!guard) return { ran: false };
    return { ran: true, value: await runUnder(guard, fn) };
  }
}

/**
 * A read-write lock's key: `client.rwlock("cfg").read()` describes a shared
 * grant (many readers at once, never with a writer), `.write()` an
 * exclusive one (nobody else, reader or writer). The server serves a key's
 * waiters strictly in arrival order: a reader arriving behind a waiting
 * writer waits for it, so neither writers nor readers starve.
 */
export class RWLock {
  readonly #session: Session;

  private constructor(
    session: Session,
    /** The read-write lock's key. */
    readonly key: string,
  ) {
    this.#session = session;
  }

  /** @internal use Client.rwlock */
  static for(session: Session, key: string): RWLock {
    return new RWLock(session, key);
  }

  /** A shared grant: held together with other readers, never with a writer. */
  read(): LockBuilder {
    return LockBuilder.for(this.#session, [this.key], { kind: "rwlock", mode: "shared" });
  }

  /** An exclusive grant: held by nobody else, reader or writer. */
  write(): LockBuilder {
    return LockBuilder.for(this.#session, [this.key], { kind: "rwlock", mode: "exclusive" });
  }
}
