/**
 * A guard's lease-call slot (docs/sdk-behaviour.md, "extend beside a
 * renewal"): at most one lease call of a guard at a time, a watchdog
 * renewal or an explicit extend(). Each call applies its answer (and
 * reschedules the watchdog) before it gives the slot back, so the guard's
 * TTL, local expiry and renewal schedule are always those of the call the
 * server saw last: an older renewal answered after a newer extend() would
 * otherwise bring back its own, longer TTL, a local expiry later than the
 * server's (promise 5).
 */
export class CallSlot {
  #held = false;
  /** Callers of take() in order; give() hands the slot to the first. */
  readonly #waiting: (() => void)[] = [];

  /** Whether a call holds the slot (or one waits for it: the slot is handed over, never left free between them). */
  get busy(): boolean {
    return this.#held;
  }

  /** Takes the slot if no call holds it or waits for it (the watchdog: it looks again shortly otherwise). */
  tryTake(): boolean {
    if (this.#held) return false;
    this.#held = true;
    return true;
  }

  /** Resolves once the slot is this caller's, after every call that holds it or waits for it. */
  take(): Promise<void> {
    if (this.tryTake()) return Promise.resolve();
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  /** Gives the slot back: to the first caller waiting, if any. */
  give(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#held = false;
  }
}
