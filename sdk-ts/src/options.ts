/**
 * What createClient and an acquisition are configured with, the defaults of
 * docs/sdk-behaviour.md, and their validation (an InvalidArgumentError from
 * createClient, before anything is sent).
 */

import { BackoffPolicy, MarginPolicy, type Backoff, type ExpiryMargin } from "./backoff.js";
import { checkPositive, checkTtl, parseDuration, type Duration } from "./duration.js";
import { InvalidArgumentError } from "./errors.js";
import { Clock, DEFAULT_MAX_OFFSET_MS } from "./hlc.js";
import { consoleLogger } from "./logger.js";
import type { LeaseEvent, Logger } from "./types.js";

/**
 * A Connect interceptor: `Interceptor` from `@connectrpc/connect`. It is
 * declared structurally here so that this package's typings need neither
 * Connect's nor the DOM lib's; write yours with Connect's own type.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- Connect's request and response types, which need the DOM lib
export type Interceptor = (next: (request: any) => Promise<any>) => (request: any) => Promise<any>;

/** Options of createClient. Durations are milliseconds or strings with a unit ("30s"). */
export interface ClientOptions {
  /** Wire protocol: "connect" (default), "grpc-web", or (Node only) "grpc". */
  protocol?: "connect" | "grpc-web" | "grpc";
  /** Label shown to others while this client holds a lock (default "hostname:pid"; "browser" in a browser). */
  holder?: string;
  /** Lease length when an acquisition sets none (default 15 s). */
  defaultTtl?: Duration;
  /** How long `unavailable` answers and transport failures are retried in a row before a call fails (default 5 s). */
  retryBudget?: Duration;
  /** Timeout of one RPC attempt, a waiting Acquire's server-side wait excluded (default 10 s). */
  requestTimeout?: Duration;
  /** Margin kept before a lease's expiry (default `{ driftFactor: 0.01, fixed: 20 }`: TTL/100 + 20 ms). */
  expiryMargin?: ExpiryMargin;
  /** Retry spacing (default 50 ms, ×2, capped at 1 s, equal jitter). */
  backoff?: Backoff;
  /** Server stamps further ahead of the local clock are not merged (default 500 ms; negative disables the check). */
  maxClockOffset?: Duration;
  /** The HLC this client ticks and merges into (default: a new one). */
  clock?: Clock;
  /** Where logs go (default: `console`, warnings and errors only; see consoleLogger). */
  logger?: Logger;
  /** Called for each renewal, renewal failure, loss and release of this client's guards. */
  onLeaseEvent?: (event: LeaseEvent) => void;
  /** Sent as `Authorization: Bearer <token>` with every request; a function is asked before each request (rotating tokens). */
  bearerToken?: string | (() => string | Promise<string>);
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
  /** Connect interceptors, run inside the SDK's own (which set the token and headers). */
  interceptors?: readonly Interceptor[];
}

/** Options of one acquisition. */
export interface AcquireOptions {
  /** Lease length (default: the client's defaultTtl); at least 100 ms. */
  ttl?: Duration;
  /**
   * How long to queue for the lock on the server. Unset: until acquired or
   * `signal` aborts. 0: one attempt. Ignored by tryAcquire.
   */
  wait?: Duration;
  /** Label shown to others (default: the client's holder). */
  holder?: string;
  /** Keep the lease alive by renewing it every TTL/3 (default true). */
  watchdog?: boolean;
  /**
   * Lock-delay: if this lease expires (its holder stopped renewing it; not
   * when it is released), its keys refuse new holders for this long, so that
   * the stalled holder's writes in flight drain before the next holder
   * starts. Waiters wait through it. 0 (the default) is none; the server
   * caps it (`BackendInfo.maxLockDelayMs`) and needs a backend that keeps
   * lock-delays (else `unimplemented`).
   */
  lockDelay?: Duration;
  /** Aborts the acquisition (the server-side wait ends at once); a guard already granted is not affected. */
  signal?: AbortSignal;
}

/** The client's settings after defaults and validation. */
export interface Settings {
  holder: string;
  defaultTtlMs: number;
  retryBudgetMs: number;
  requestTimeoutMs: number;
  backoff: BackoffPolicy;
  margin: MarginPolicy;
  clock: Clock;
  logger: Logger;
  onLeaseEvent: ((event: LeaseEvent) => void) | undefined;
}

export const DEFAULT_TTL_MS = 15_000;
export const DEFAULT_RETRY_BUDGET_MS = 5_000;
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;

/** Resolves and validates the options; throws InvalidArgumentError. */
export function settingsFrom(options: ClientOptions, defaultHolder: string): Settings {
  if (options.holder !== undefined && typeof options.holder !== "string") {
    throw new InvalidArgumentError(`holdfast: holder: ${String(options.holder)} is not a string`);
  }
  if (options.onLeaseEvent !== undefined && typeof options.onLeaseEvent !== "function") {
    throw new InvalidArgumentError("holdfast: onLeaseEvent: not a function");
  }
  const maxOffsetMs = options.maxClockOffset === undefined ? DEFAULT_MAX_OFFSET_MS : parseDuration("maxClockOffset", options.maxClockOffset);
  return {
    holder: options.holder ?? defaultHolder,
    defaultTtlMs: checkTtl(options.defaultTtl ?? DEFAULT_TTL_MS, "defaultTtl"),
    retryBudgetMs: checkPositive("retryBudget", options.retryBudget ?? DEFAULT_RETRY_BUDGET_MS),
    requestTimeoutMs: checkPositive("requestTimeout", options.requestTimeout ?? DEFAULT_REQUEST_TIMEOUT_MS),
    backoff: BackoffPolicy.from(options.backoff),
    margin: MarginPolicy.from(options.expiryMargin),
    clock: options.clock ?? new Clock({ maxOffsetMs }),
    logger: options.logger ?? consoleLogger(),
    onLeaseEvent: options.onLeaseEvent,
  };
}
