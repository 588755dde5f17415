// Everything the entry points export besides createClient.
export { Client, Guard, LockBuilder } from "./client.js";
export type { AcquireOptions, BackendInfo, ClientOptions, LockEvent, LockEventType, ServerInfo } from "./client.js";
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
} from "./errors.js";
export type { LeaseLostReason, LockState } from "./errors.js";
export { validateWrite } from "./fencing.js";
