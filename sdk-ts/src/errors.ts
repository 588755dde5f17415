/**
 * Errors of the holdfast SDK. Branch on the class (instanceof), never on the
 * message. Errors the server reports carry their Connect code name in `code`.
 */

import { Code, ConnectError } from "@connectrpc/connect";
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
}

/** Base class of every error the SDK throws. */
export class HoldfastError extends Error {
  override readonly name: string = "HoldfastError";
  /** Connect code name ("unavailable", ...) when the server reported it. */
  readonly code: string | undefined;
  constructor(message: string, options?: { cause?: unknown; code?: string }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = options?.code;
  }
}

/** The key is held by someone else (tryAcquire / acquire with no wait), or stayed held for the whole wait. */
export class NotAcquiredError extends HoldfastError {
  override readonly name = "NotAcquiredError";
  constructor(
    readonly key: string,
    /** The holder, when the server reported it. */
    readonly current: LockState | undefined,
  ) {
    super(
      current
        ? `holdfast: lock ${JSON.stringify(key)} not acquired: held by ${JSON.stringify(current.holder)} (fencing token ${current.fencingToken})`
        : `holdfast: lock ${JSON.stringify(key)} not acquired`,
    );
  }
}

/**
 * Why a guard no longer holds its lease (the same reasons as the Go SDK's
 * LossReason).
 */
export type LeaseLostReason =
  /** The server answered extended=false or released=false: the owner token no longer holds the key. */
  | "rejected"
  /** No renewal succeeded before the lease's expiry on the client's monotonic clock (the last renewal error is the `cause`). */
  | "expired"
  /** The client was closed while the guard was held. */
  | "client_closed"
  /**
   * unlock() retried a release whose first attempt failed in transit, and the
   * retry answered released=false. The token no longer holds the key either
   * way, but the first attempt may well have been the one that released it,
   * so this is not a proven loss during the critical section.
   */
  | "release_unconfirmed";

/**
 * The guard no longer holds its lease: what its signal aborts with, and what
 * fencingToken(), extend() and unlock() throw afterwards. unlock() of a lost
 * lease throws it too: never a quiet success (etcd#22082). Work done under
 * the guard may overlap with the next holder's: fence your writes.
 */
export class LeaseLostError extends HoldfastError {
  override readonly name = "LeaseLostError";
  constructor(
    readonly key: string,
    readonly reason: LeaseLostReason,
    cause?: unknown,
    /** The lost lease's fencing token, when known. */
    readonly fencingToken?: bigint,
  ) {
    super(
      `holdfast: lease on ${JSON.stringify(key)}${fencingToken === undefined ? "" : ` (fencing token ${fencingToken})`} lost: ${reasonText[reason]}` +
        (reason === "expired" && cause instanceof Error ? `; last renewal error: ${cause.message}` : ""),
      { cause },
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
  constructor(readonly key: string) {
    super(`holdfast: lock ${JSON.stringify(key)} was released`);
  }
}

/** A write carried a fencing token older than the resource's watermark. */
export class StaleTokenError extends HoldfastError {
  override readonly name = "StaleTokenError";
  constructor(
    readonly token: bigint,
    readonly watermark: bigint,
  ) {
    super(`holdfast: stale fencing token ${token}, the resource has seen ${watermark}`);
  }
}

/** The client was closed. */
export class ClientClosedError extends HoldfastError {
  override readonly name = "ClientClosedError";
  constructor() {
    super("holdfast: client closed");
  }
}

/** The server (or the SDK, before sending) refused a request: bad key, TTL out of range, stamp too far ahead. */
export class InvalidArgumentError extends HoldfastError {
  override readonly name = "InvalidArgumentError";
}
/** The server or its backend could not be reached or is restarting. Retrying later may succeed. */
export class UnavailableError extends HoldfastError {
  override readonly name = "UnavailableError";
}
/** The caller's own deadline (or signal) ended the call. */
export class DeadlineExceededError extends HoldfastError {
  override readonly name = "DeadlineExceededError";
}
/** The call was cancelled by the caller's AbortSignal. */
export class CanceledError extends HoldfastError {
  override readonly name = "CanceledError";
}
/** The request carried no valid credentials. */
export class UnauthenticatedError extends HoldfastError {
  override readonly name = "UnauthenticatedError";
}
/** The caller is authenticated but not allowed. */
export class PermissionDeniedError extends HoldfastError {
  override readonly name = "PermissionDeniedError";
}
/** A server limit was hit (too many waiters, keys, requests). */
export class ResourceExhaustedError extends HoldfastError {
  override readonly name = "ResourceExhaustedError";
}
/** Any other failure reported by the server or the transport. */
export class ServerError extends HoldfastError {
  override readonly name = "ServerError";
}

const codeNames: Record<number, string> = {
  [Code.Canceled]: "canceled",
  [Code.Unknown]: "unknown",
  [Code.InvalidArgument]: "invalid_argument",
  [Code.DeadlineExceeded]: "deadline_exceeded",
  [Code.NotFound]: "not_found",
  [Code.AlreadyExists]: "already_exists",
  [Code.PermissionDenied]: "permission_denied",
  [Code.ResourceExhausted]: "resource_exhausted",
  [Code.FailedPrecondition]: "failed_precondition",
  [Code.Aborted]: "aborted",
  [Code.OutOfRange]: "out_of_range",
  [Code.Unimplemented]: "unimplemented",
  [Code.Internal]: "internal",
  [Code.Unavailable]: "unavailable",
  [Code.DataLoss]: "data_loss",
  [Code.Unauthenticated]: "unauthenticated",
};

/**
 * Maps anything a Connect call threw to the SDK's error classes. Errors the
 * SDK made itself pass through unchanged.
 */
export function fromConnectError(err: unknown, what: string): HoldfastError {
  if (err instanceof HoldfastError) return err;
  const ce = ConnectError.from(err);
  const code = codeNames[ce.code] ?? "unknown";
  const message = `holdfast: ${what}: ${ce.rawMessage || code}`;
  const opts = { cause: err, code };
  switch (ce.code) {
    case Code.InvalidArgument:
    case Code.OutOfRange:
      return new InvalidArgumentError(message, opts);
    case Code.Unavailable:
      return new UnavailableError(message, opts);
    case Code.DeadlineExceeded:
      return new DeadlineExceededError(message, opts);
    case Code.Canceled:
      return new CanceledError(message, opts);
    case Code.Unauthenticated:
      return new UnauthenticatedError(message, opts);
    case Code.PermissionDenied:
      return new PermissionDeniedError(message, opts);
    case Code.ResourceExhausted:
      return new ResourceExhaustedError(message, opts);
    default:
      return new ServerError(message, opts);
  }
}

/** Whether an error is worth retrying: the server or the network may recover. */
export function isRetryable(err: unknown): boolean {
  return err instanceof UnavailableError;
}
