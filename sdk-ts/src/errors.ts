/**
 * Errors of the holdfast SDK. Every one is a HoldfastError with a `code`
 * (the same names as the Go and Python SDKs); branch on the class or the
 * code, never on the message.
 */

import { HoldfastError, type ErrorCode } from "./holdfast-error.js";
import type { KeyDelay, LeaseLostReason, LockState } from "./types.js";

/** What else NotAcquiredError carries: the keys of a multi-key lock, a key's lock-delay. */
export interface NotAcquiredDetails {
  /** Every key of a multi-key lock. */
  keys?: readonly string[];
  /** Set when a key nobody held was in its lock-delay. */
  delay?: KeyDelay;
}

/** The key (or a key of a multi-key lock) stayed held: by someone else at the one attempt (wait 0), or for the whole wait. */
export class NotAcquiredError extends HoldfastError {
  override readonly name = "NotAcquiredError";
  declare readonly code: "not_acquired";
  /** Every key of a multi-key lock; undefined for one key. */
  readonly keys: readonly string[] | undefined;
  /** Set when a key nobody held was in its lock-delay (the lock-delay after an expired lease). */
  readonly delay: KeyDelay | undefined;
  constructor(
    /** The key (a multi-key lock's first key). */
    readonly key: string,
    /** The holder (of one of the keys), when the server reported it. */
    readonly current: LockState | undefined,
    details: NotAcquiredDetails = {},
  ) {
    const keys = details.keys && details.keys.length > 1 ? details.keys : undefined;
    const { delay } = details;
    let message = `holdfast: lock ${JSON.stringify(keys ?? key)} not acquired`;
    const writer = current?.kind === "rwlock" ? current.holders.find((g) => g.mode === "exclusive") : undefined;
    if (current?.kind === "semaphore") {
      message += `: semaphore with ${current.permitsInUse} of ${current.limit} permits in use by ${current.holders.length} holders`;
    } else if (writer) message += `: written by ${JSON.stringify(writer.holder)} (fencing token ${writer.fencingToken})`;
    else if (current?.kind === "rwlock") message += `: read by ${current.holders.length} holders`;
    else if (current?.kind === "election") message += `: led by ${JSON.stringify(current.holder)} (term ${current.fencingToken})`;
    else if (current && keys) message += `: ${JSON.stringify(current.key)} held by ${JSON.stringify(current.holder)} (fencing token ${current.fencingToken})`;
    else if (current) message += `: held by ${JSON.stringify(current.holder)} (fencing token ${current.fencingToken})`;
    else if (delay) message += `: ${JSON.stringify(delay.key)} is in its lock-delay (${Math.round(delay.remainingMs)}ms left)`;
    super(message, { code: "not_acquired" });
    this.keys = keys;
    this.delay = delay;
  }
}

/**
 * The guard no longer holds its lease: what its signal aborts with, and what
 * fencingToken(), extend() and unlock() throw afterwards. unlock() of a lost
 * lease throws it too: never a quiet success. Work done under the guard may
 * overlap with the next holder's: fence your writes.
 */
export class LeaseLostError extends HoldfastError {
  override readonly name = "LeaseLostError";
  declare readonly code: "lease_lost";
  constructor(
    /** The lease's key (a multi-key lease's first key). */
    readonly key: string,
    readonly reason: LeaseLostReason,
    cause?: unknown,
    /** The lost lease's fencing token (of key), when known. */
    readonly fencingToken?: bigint,
    /** Every key of a multi-key lease; undefined for one key. */
    readonly keys?: readonly string[],
  ) {
    const what = keys ? JSON.stringify(keys) : `${JSON.stringify(key)}${fencingToken === undefined ? "" : ` (fencing token ${fencingToken})`}`;
    super(
      `holdfast: lease on ${what} lost: ${reasonText[reason]}` +
        (reason === "expired" && cause instanceof Error ? `; last renewal error: ${cause.message}` : ""),
      { code: "lease_lost", cause },
    );
  }
}

const reasonText: Record<LeaseLostReason, string> = {
  rejected: "rejected by the server",
  expired: "expired before a renewal succeeded",
  client_closed: "client closed",
  release_unconfirmed: "released=false after a release attempt that may have succeeded",
};

/** The guard was unlocked by its owner; it no longer holds. */
export class LockReleasedError extends HoldfastError {
  override readonly name = "LockReleasedError";
  declare readonly code: "lock_released";
  constructor(readonly key: string) {
    super(`holdfast: lock ${JSON.stringify(key)} was released`, { code: "lock_released" });
  }
}

/** A write carried a fencing token older than the resource's watermark. */
export class StaleTokenError extends HoldfastError {
  override readonly name = "StaleTokenError";
  declare readonly code: "stale_token";
  constructor(
    readonly token: bigint,
    readonly watermark: bigint,
  ) {
    super(`holdfast: stale fencing token ${token}, the resource has seen ${watermark}`, { code: "stale_token" });
  }
}

/** The client was closed. */
export class ClientClosedError extends HoldfastError {
  override readonly name = "ClientClosedError";
  declare readonly code: "client_closed";
  constructor() {
    super("holdfast: client closed", { code: "client_closed" });
  }
}

/** Options of the errors below: what caused them. */
interface CauseOptions {
  cause?: unknown;
}

/** The server or the SDK (before sending) refused an argument: bad key, TTL out of range, stamp too far ahead. */
export class InvalidArgumentError extends HoldfastError {
  override readonly name = "InvalidArgumentError";
  declare readonly code: "invalid_argument";
  constructor(message: string, options: CauseOptions = {}) {
    super(message, { ...options, code: "invalid_argument" });
  }
}

/** The server or its backend could not be reached within the retry budget, or is restarting. Retrying later may succeed. */
export class UnavailableError extends HoldfastError {
  override readonly name = "UnavailableError";
  declare readonly code: "unavailable";
  constructor(message: string, options: CauseOptions = {}) {
    super(message, { ...options, code: "unavailable" });
  }
}

/** The server answered that the call's deadline passed. */
export class DeadlineExceededError extends HoldfastError {
  override readonly name = "DeadlineExceededError";
  declare readonly code: "deadline_exceeded";
  constructor(message: string, options: CauseOptions = {}) {
    super(message, { ...options, code: "deadline_exceeded" });
  }
}

/** The call was cancelled. */
export class CanceledError extends HoldfastError {
  override readonly name = "CanceledError";
  declare readonly code: "canceled";
  constructor(message: string, options: CauseOptions = {}) {
    super(message, { ...options, code: "canceled" });
  }
}

/** The request carried no valid credentials (see the `bearerToken` option). */
export class UnauthenticatedError extends HoldfastError {
  override readonly name = "UnauthenticatedError";
  declare readonly code: "unauthenticated";
  constructor(message: string, options: CauseOptions = {}) {
    super(message, { ...options, code: "unauthenticated" });
  }
}

/** The caller is authenticated but not allowed (a key outside its token's prefixes, a read-only token). */
export class PermissionDeniedError extends HoldfastError {
  override readonly name = "PermissionDeniedError";
  declare readonly code: "permission_denied";
  constructor(message: string, options: CauseOptions = {}) {
    super(message, { ...options, code: "permission_denied" });
  }
}

/** A server limit was hit (too many waiters, keys, requests). */
export class ResourceExhaustedError extends HoldfastError {
  override readonly name = "ResourceExhaustedError";
  declare readonly code: "resource_exhausted";
  constructor(message: string, options: CauseOptions = {}) {
    super(message, { ...options, code: "resource_exhausted" });
  }
}

/** Any other failure the server reported (`failed_precondition`, `unimplemented`, `internal`, `unknown`, ...). */
export class ServerError extends HoldfastError {
  override readonly name = "ServerError";
}

export { HoldfastError, type ErrorCode };
