/**
 * The retry spacing and the safety margin on a guard's local expiry: the
 * two timing policies a client is configured with.
 */

import { checkNonNegative, checkPositive, type Duration } from "./duration.js";
import { InvalidArgumentError } from "./errors.js";

/** Exponential backoff: `initial`, times `multiplier` per retry, capped at `max`. */
export interface Backoff {
  /** The first delay (default 50 ms). */
  initial?: Duration;
  /** The cap (default 1 s). */
  max?: Duration;
  /** Growth per retry (default 2). */
  multiplier?: number;
}

/**
 * The margin a guard keeps before the lease's expiry: it is poisoned at
 * `sent + TTL − (TTL × driftFactor + fixed)`, so a timer that fires late or
 * a client clock that runs slow against the store's cannot leave it "held"
 * after the store could grant the key to someone else.
 */
export interface ExpiryMargin {
  /** Clock-rate drift allowed, as a fraction of the TTL (default 0.01). */
  driftFactor?: number;
  /** A fixed allowance (default 20 ms). */
  fixed?: Duration;
}

/** Backoff with equal jitter, resolved and validated. */
export class BackoffPolicy {
  constructor(
    readonly initialMs: number,
    readonly maxMs: number,
    readonly multiplier: number,
  ) {}

  static from(b: Backoff = {}): BackoffPolicy {
    const initial = checkPositive("backoff.initial", b.initial ?? 50);
    const max = checkPositive("backoff.max", b.max ?? 1_000);
    const multiplier = b.multiplier ?? 2;
    if (!Number.isFinite(multiplier) || multiplier < 1) {
      throw new InvalidArgumentError(`holdfast: backoff.multiplier: ${multiplier} must be a finite number >= 1`);
    }
    return new BackoffPolicy(initial, Math.max(initial, max), multiplier);
  }

  /**
   * The pause before retry number attempt (0-based): uniformly random in
   * [d/2, d], d = min(initial × multiplier^attempt, max). Half of each delay
   * is kept so that retries never bunch at zero.
   */
  delay(attempt: number): number {
    const d = Math.min(this.maxMs, this.initialMs * this.multiplier ** Math.min(attempt, 64));
    return d / 2 + (Math.random() * d) / 2;
  }
}

/** The expiry margin, resolved and validated. */
export class MarginPolicy {
  constructor(
    readonly driftFactor: number,
    readonly fixedMs: number,
  ) {}

  static from(m: ExpiryMargin = {}): MarginPolicy {
    const driftFactor = m.driftFactor ?? 0.01;
    if (!Number.isFinite(driftFactor) || driftFactor < 0 || driftFactor >= 1) {
      throw new InvalidArgumentError(`holdfast: expiryMargin.driftFactor: ${driftFactor} must be in [0, 1)`);
    }
    return new MarginPolicy(driftFactor, checkNonNegative("expiryMargin.fixed", m.fixed ?? 20));
  }

  /** How long before a lease of ttlMs ends the guard counts it lost. */
  marginMs(ttlMs: number): number {
    return ttlMs * this.driftFactor + this.fixedMs;
  }
}
