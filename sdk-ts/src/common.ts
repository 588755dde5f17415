// Everything the entry points export besides createClient.
export { Client } from "./client.js";
export { Guard } from "./guard.js";
export { LockBuilder, RWLock, type RunResult } from "./lock-builder.js";
export { ElectionBuilder, Leadership } from "./election.js";
export { MAX_VALUE_BYTES } from "./primitives.js";
export type { ScheduledJob } from "./scheduled.js";
export type { AcquireOptions, ClientOptions, Interceptor } from "./options.js";
export { DEFAULT_REQUEST_TIMEOUT_MS, DEFAULT_RETRY_BUDGET_MS, DEFAULT_TTL_MS } from "./options.js";
export type { Backoff, ExpiryMargin } from "./backoff.js";
export { MIN_TTL_MS, formatDuration, parseDuration, type Duration } from "./duration.js";
export { consoleLogger, type LogLevel } from "./logger.js";
export type { BackendInfo, Grant, GrantMode, Inspection, KeyDelay, Kind, Leader, LeaseEvent, LeaseLostReason, LockEvent, LockEventType, LockState, Logger, Observation, ServerInfo } from "./types.js";
export { Clock, ClockOffsetError, DEFAULT_MAX_OFFSET_MS, Timestamp } from "./hlc.js";
export type { PhysicalClock } from "./hlc.js";
export {
  CanceledError,
  ClientClosedError,
  DeadlineExceededError,
  HoldfastError,
  InvalidArgumentError,
  LeaseLostError,
  LockReleasedError,
  NotAcquiredError,
  PermissionDeniedError,
  ResourceExhaustedError,
  ServerError,
  StaleTokenError,
  UnauthenticatedError,
  UnavailableError,
  type ErrorCode,
  type NotAcquiredDetails,
} from "./errors.js";
export { validateWrite } from "./fencing.js";
