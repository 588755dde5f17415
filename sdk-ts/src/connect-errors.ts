/** Maps what a Connect call threw to the SDK's errors, and says which are worth retrying. */

import { Code, ConnectError } from "@connectrpc/connect";
import {
  CanceledError,
  DeadlineExceededError,
  HoldfastError,
  InvalidArgumentError,
  PermissionDeniedError,
  ResourceExhaustedError,
  ServerError,
  UnauthenticatedError,
  UnavailableError,
  type ErrorCode,
} from "./errors.js";

const codeNames: Record<Code, ErrorCode> = {
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
 * SDK made itself pass through unchanged. A fetch that failed before any
 * answer (the Fetch standard rejects with a TypeError: refused, reset, DNS)
 * is `unavailable`, as connect-node reports the same failures.
 */
export function fromConnectError(err: unknown, what: string): HoldfastError {
  if (err instanceof HoldfastError) return err;
  const ce = ConnectError.from(err);
  let code = codeNames[ce.code];
  if (code === "unknown" && ce.cause instanceof TypeError) code = "unavailable";
  const message = `holdfast: ${what}: ${ce.rawMessage || code}`;
  const opts = { cause: err };
  switch (code) {
    case "invalid_argument":
      return new InvalidArgumentError(message, opts);
    case "unavailable":
      return new UnavailableError(message, opts);
    case "deadline_exceeded":
      return new DeadlineExceededError(message, opts);
    case "canceled":
      return new CanceledError(message, opts);
    case "unauthenticated":
      return new UnauthenticatedError(message, opts);
    case "permission_denied":
      return new PermissionDeniedError(message, opts);
    case "resource_exhausted":
      return new ResourceExhaustedError(message, opts);
    default:
      return new ServerError(message, { code, cause: err });
  }
}

/**
 * Whether a call that failed this way may succeed if sent again: the server
 * was unreachable or restarting (`unavailable`), or the attempt timed out
 * (`deadline_exceeded`: the SDK's own per-attempt timeout, which the server
 * also sees).
 */
export function isTransient(err: HoldfastError): boolean {
  return err.code === "unavailable" || err.code === "deadline_exceeded";
}

/** The error a call reports when its retry budget ran out: always `unavailable`, the last failure as its cause. */
export function exhausted(err: HoldfastError, what: string, budget: string): UnavailableError {
  if (err instanceof UnavailableError) return err;
  return new UnavailableError(`holdfast: ${what}: no answer within the retry budget ${budget} (last: ${err.message})`, { cause: err });
}
