/**
 * The base of every error the SDK throws, and the codes they carry. It sits
 * below every other module (the HLC's ClockOffsetError extends it too), so
 * nothing here imports the rest of the SDK.
 */

/**
 * What went wrong, the same names in the Go, TypeScript and Python SDKs:
 * Connect codes for what the server answered, SDK codes for what the SDK
 * decided. Branch on `code` (or the class), never on the message.
 */
export type ErrorCode =
  // Connect codes: what the server (or the transport) answered.
  | "invalid_argument"
  | "unavailable"
  | "deadline_exceeded"
  | "canceled"
  | "unauthenticated"
  | "permission_denied"
  | "resource_exhausted"
  | "failed_precondition"
  | "unimplemented"
  | "internal"
  | "unknown"
  | "not_found"
  | "already_exists"
  | "aborted"
  | "out_of_range"
  | "data_loss"
  // SDK codes: what the SDK decided.
  | "not_acquired"
  | "lease_lost"
  | "lock_released"
  | "client_closed"
  | "stale_token"
  | "clock_offset";

/** Base class of every error the SDK throws; `code` says which situation it is. */
export class HoldfastError extends Error {
  override readonly name: string = "HoldfastError";
  readonly code: ErrorCode;
  constructor(message: string, options: { code: ErrorCode; cause?: unknown }) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code;
  }
}
