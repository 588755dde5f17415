/**
 * What a client and its guards share: the RPC client, the HLC, the
 * settings, the lease-event sink, and the retry loop of idempotent calls.
 * Internal: the public face is Client.
 */

import { createClient as createConnectClient, type CallOptions, type Client as RpcClient, type Transport } from "@connectrpc/connect";
import { exhausted, fromConnectError, isTransient } from "./connect-errors.js";
import { formatDuration } from "./duration.js";
import { ClientClosedError } from "./errors.js";
import { LockService } from "./gen/holdfast/lock/v1/lock_pb.js";
import { ClockOffsetError, Timestamp } from "./hlc.js";
import type { Settings } from "./options.js";
import { Renewer } from "./renewer.js";
import type { LeaseEvent } from "./types.js";
import { monotonicNow, msFromDuration, sleep } from "./util.js";

export type Rpc = RpcClient<typeof LockService>;

/** Something Client.close() must settle: a guard still held. */
export interface Closable {
  closeForClient(budgetMs: number): Promise<void>;
}

const eventLevels = { renewed: "debug", renewal_failed: "warn", lost: "warn", released: "debug" } as const;

/**
 * One waiting Acquire asks the server to wait at most this long; a longer
 * (or unbounded) wait then queues again. Requeuing moves the caller to the
 * back of the server's queue, so it is long (the Go SDK's value). A server
 * whose --max-wait is shorter refuses it; the client then learns the
 * server's max_wait and asks for at most that.
 */
const MAX_SERVER_WAIT_MS = 5 * 60_000;

export class Session {
  readonly rpc: Rpc;
  readonly open = new Set<Closable>();
  /** The client's watchdog: renews every guard. */
  readonly renewer: Renewer;
  /** Aborted, with a ClientClosedError, when the client closes: ends acquisitions in flight. */
  readonly #closing = new AbortController();
  /** The server's max_wait, once a refused wait made the client ask (undefined: not asked yet; 0: the server does not say). */
  #maxWaitMs: number | undefined;

  constructor(
    transport: Transport,
    readonly settings: Settings,
  ) {
    this.rpc = createConnectClient(LockService, transport);
    this.renewer = new Renewer(this);
  }

  get clock() {
    return this.settings.clock;
  }

  get closed(): boolean {
    return this.#closing.signal.aborted;
  }

  /** Marks the client closed: acquisitions in flight end with ClientClosedError. */
  close(): void {
    this.#closing.abort(new ClientClosedError());
    this.renewer.close();
  }

  /** Aborts when the client closes. */
  get closingSignal(): AbortSignal {
    return this.#closing.signal;
  }

  checkOpen(): void {
    if (this.closed) throw new ClientClosedError();
  }

  /**
   * Merges a server stamp into the clock. A stamp further ahead than the max
   * offset is not merged: adopting it would make this client's next stamps
   * look too far ahead to every other server.
   */
  merge(p: Parameters<typeof Timestamp.fromProto>[0]): void {
    const ts = Timestamp.fromProto(p);
    if (ts.isZero()) return;
    try {
      this.settings.clock.update(ts);
    } catch (e) {
      if (!(e instanceof ClockOffsetError)) throw e;
      this.settings.logger.warn("server stamp beyond the max clock offset not merged", { error: e });
    }
  }

  /** Sends a lease event to the listener and the logger. A listener that throws is logged; it never stops the caller (the watchdog). */
  emit(event: LeaseEvent): void {
    const { type, ...fields } = event;
    this.settings.logger[eventLevels[type]](`lease ${type.replace("_", " ")}`, fields);
    const listener = this.settings.onLeaseEvent;
    if (!listener) return;
    try {
      listener(event);
    } catch (e) {
      this.settings.logger.error("onLeaseEvent listener threw", { event: type, key: event.key, error: e });
    }
  }

  /** The longest wait one Acquire asks the server for. */
  serverWaitCapMs(): number {
    return this.#maxWaitMs ? Math.min(MAX_SERVER_WAIT_MS, this.#maxWaitMs) : MAX_SERVER_WAIT_MS;
  }

  /**
   * Called when the server refused (invalid_argument) a waiting Acquire
   * that asked for waitMs: whether the server's max_wait (GetServerInfo) is
   * shorter, so that the acquisition re-sends asking for at most that.
   */
  async learnMaxWait(waitMs: number): Promise<boolean> {
    if (this.#maxWaitMs === undefined) {
      try {
        const res = await this.retrying("server info", (opts) => this.rpc.getServerInfo({}, opts));
        this.#maxWaitMs = msFromDuration(res.maxWait);
      } catch {
        return false;
      }
    }
    return this.#maxWaitMs > 0 && this.#maxWaitMs < waitMs;
  }

  /** The timeout of one attempt: the request timeout, within what is left of the call's budget. */
  attemptTimeoutMs(leftMs: number): number {
    return Math.max(1, Math.ceil(Math.min(this.settings.requestTimeoutMs, leftMs)));
  }

  /** Per-attempt call options (see attemptTimeoutMs). */
  callOptions(leftMs: number, signal?: AbortSignal): CallOptions {
    return { timeoutMs: this.attemptTimeoutMs(leftMs), signal };
  }

  /**
   * Runs an idempotent call, retrying `unavailable` answers and timed-out
   * attempts with the backoff for at most the retry budget; then it fails
   * with the `unavailable` error. Every other error is thrown at once.
   */
  async retrying<T>(what: string, call: (opts: CallOptions) => Promise<T>): Promise<T> {
    const budget = this.settings.retryBudgetMs;
    const deadline = monotonicNow() + budget;
    for (let attempt = 0; ; attempt++) {
      try {
        return await call(this.callOptions(deadline - monotonicNow()));
      } catch (e) {
        const err = fromConnectError(e, what);
        if (!isTransient(err)) throw err;
        if (!(await this.backoffWithin(attempt, deadline))) throw exhausted(err, what, formatDuration(budget));
      }
    }
  }

  /**
   * Sleeps the backoff before retry number attempt. Resolves to whether the
   * retry may go: false when signal aborted, or when the pause would end
   * past deadline (monotonic ms), after sleeping until the deadline instead.
   * So a call that keeps failing gives up at its deadline, not a backoff
   * step before it, and no retry ever follows a pause cut short.
   */
  async backoffWithin(attempt: number, deadline: number, signal?: AbortSignal): Promise<boolean> {
    const left = deadline - monotonicNow();
    if (left <= 0) return false;
    const pause = this.settings.backoff.delay(attempt);
    if (pause >= left) {
      await sleep(left, signal);
      return false;
    }
    return sleep(pause, signal);
  }
}
