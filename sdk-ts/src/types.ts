/**
 * Plain data the SDK hands out: lock states, server facts, watch and lease
 * events, and the logger it writes to.
 */

import type { Timestamp } from "./hlc.js";

/** Lock state as anyone may see it (no owner token). */
export interface LockState {
  key: string;
  fencingToken: bigint;
  /** Free-text label the holder gave at acquire. */
  holder: string;
  /** The server's view of the expiry; informational only. */
  expiresAt: Date | undefined;
  /** HLC stamp of the holder's acquisition. */
  stamp: Timestamp;
  /** Callers queued for the key on the answering server. */
  waiters: number;
  /** The lock-delay (ms) that follows this lease if it expires (0: none). */
  lockDelayMs: number;
  /** What the key is: "mutex" (a lock), "semaphore" or "rwlock" (fixed by its first grant). */
  kind: Kind;
  /** The key's capacity: 1 for a lock, a semaphore's limit, an rwlock's reader capacity. */
  limit: number;
  /** The permits its holders hold, at most limit (1 for a held lock; an rwlock writer holds all of them). */
  permitsInUse: number;
  /**
   * Every lease held on the key, in fencing-token order: one for a lock (the
   * fields above), each permit holder, reader or writer otherwise. For a
   * semaphore or rwlock the single-holder fields above (fencingToken,
   * holder, expiresAt, stamp) are those of the lease that ends first.
   */
  holders: readonly Grant[];
}

/** What a key is: one holder ("mutex": a lock), holders sharing a limit of permits (a semaphore), or many readers or one writer (an rwlock). */
export type Kind = "mutex" | "semaphore" | "rwlock" | "election";

/** Whether a grant shares its key: "shared" is an rwlock's reader; a lock, a semaphore grant and a writer are "exclusive". */
export type GrantMode = "exclusive" | "shared";

/** One lease held on a key, as others see it (never its owner token). */
export interface Grant {
  fencingToken: bigint;
  /** Free-text label the holder gave at acquire. */
  holder: string;
  /** The server's view of the expiry; informational only. */
  expiresAt: Date | undefined;
  /** HLC stamp of the grant. */
  stamp: Timestamp;
  /** Its share of the key's limit (a semaphore grant's permits; 1 for a reader, the whole limit for a writer). */
  permits: number;
  mode: GrantMode;
  /** The lock-delay (ms) that follows this lease if it expires (locks only; 0: none). */
  lockDelayMs: number;
  /** An election leader's value ("election" keys; "" otherwise). */
  value: string;
}

/**
 * A key nobody holds that refuses new holders for a while: the lock-delay
 * after the expiry of a lease taken with `.lockDelay()`.
 */
export interface KeyDelay {
  key: string;
  /** The server's view of when the key takes holders again; informational only. */
  until: Date | undefined;
  /** Milliseconds left when the server answered. */
  remainingMs: number;
}

/** What `client.inspectDelay(key)` answers: the holder, or (nobody holding) the key's lock-delay. */
export interface Inspection {
  /** The holder; undefined when nobody holds the key. */
  state: LockState | undefined;
  /** Set when nobody holds the key but it is in its lock-delay. */
  delay: KeyDelay | undefined;
}

/** Why a guard no longer holds its lease: the same strings in the Go, TypeScript and Python SDKs. */
export type LeaseLostReason =
  /** The server answered extended=false or released=false: the owner token no longer holds the key. */
  | "rejected"
  /** No renewal succeeded before the guard's local expiry (the last renewal error is the `cause`). */
  | "expired"
  /** The client was closed while the guard was held, and the release was not confirmed. */
  | "client_closed"
  /**
   * unlock() retried a release whose first attempt failed in transit, and the
   * retry answered released=false. The token no longer holds the key either
   * way, but the first attempt may well have been the one that released it,
   * so this is not a proven loss during the critical section.
   */
  | "release_unconfirmed";

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
  /** True when waiters are served first-in first-out across servers. */
  fair: boolean;
  /** The most keys one multi-key lock may take (1: one key per lock). */
  maxKeys: number;
  /** True when the backend recognises repeats of a request (the SDK sends a request id on every Acquire, Extend and Release, the same on its retries). */
  requestIds: boolean;
  /** The longest lockDelay accepted, in ms (0: none). */
  maxLockDelayMs: number;
  /** The kinds of key the backend keeps (always "mutex"); another is answered `unimplemented`. */
  kinds: readonly Kind[];
  /** The largest limit of a semaphore (0: no semaphores). */
  maxLimit: number;
  /** The reader capacity of every rwlock (0: no rwlocks). */
  rwlockReaders: number;
}

export interface ServerInfo {
  version: string;
  backend: BackendInfo;
  maxClockOffsetMs: number;
  /** The longest wait one Acquire may ask for (the server's --max-wait; 0 when the server does not say). */
  maxWaitMs: number;
  stamp: Timestamp;
}

/** "proclaimed": an election's leader replaced its value (its term and expiry unchanged). */
export type LockEventType = "synced" | "acquired" | "released" | "expired" | "proclaimed";

/** An election's leadership as anyone may see it (never its owner token). */
export interface Leader {
  key: string;
  /** The leadership's fencing token: strictly increasing per key over every leadership. */
  term: bigint;
  /** The label the leader campaigned with. */
  holder: string;
  /** The value the leader campaigned with, or its last proclaimed one. */
  value: string;
  /** The server's view of the expiry unless renewed; informational only. */
  expiresAt: Date | undefined;
  /** HLC stamp of the leadership's acquisition. */
  stamp: Timestamp;
}

/** One message of `election.observe()`: the leader at that moment, or undefined when nobody leads. */
export interface Observation {
  leader: Leader | undefined;
  /** The server's HLC reading when it sent the message. */
  stamp: Timestamp;
}

/** One event of `client.watch()`: what happened to a lock, seen by the server. */
export interface LockEvent {
  type: LockEventType;
  /** The lock the event is about; undefined for "synced". */
  state: LockState | undefined;
  stamp: Timestamp;
}

/**
 * What happened to one of this client's own guards, as the `onLeaseEvent`
 * listener and the logger see it. For a multi-key lease, `keys` lists every
 * key, and `key` and `fencingToken` are its first key's.
 */
export type LeaseEvent =
  /** A renewal succeeded. */
  | { type: "renewed"; key: string; keys?: readonly string[]; fencingToken: bigint; ttlMs: number; renewals: number; latencyMs: number }
  /** A renewal attempt failed and will be retried until the local expiry. */
  | { type: "renewal_failed"; key: string; keys?: readonly string[]; fencingToken: bigint; error: Error; remainingMs: number }
  /** The guard was poisoned: its signal aborted with `error`. */
  | { type: "lost"; key: string; keys?: readonly string[]; fencingToken: bigint; reason: LeaseLostReason; error: Error }
  /** unlock() was confirmed by the server. */
  | { type: "released"; key: string; keys?: readonly string[]; fencingToken: bigint };

/**
 * Where the SDK writes its logs. `console` fits, and so do pino, winston and
 * most loggers (or a thin adapter). Fields carry the details (key, fencing
 * token, error).
 */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}
