/**
 * The client's watchdog (docs/sdk-behaviour.md, "The guard and the
 * watchdog"): one renewer for every guard of a client, so that renewing
 * costs calls in proportion to the clients, not to the leases. Each guard is
 * due TTL/3 after its last successful renewal was sent. Its first renewal
 * comes a little sooner: each client draws a phase f in [0,1) once, when it
 * is created, and every guard's first renewal is due at
 * sent + TTL/3 − f·TTL/6 (sent: when its acquisition was sent), the same
 * shift for all the client's guards. Clients whose guards were acquired at
 * the same moments (a fleet started together) so spread their renewals over
 * a sixth of the TTL, and stay spread, instead of all sending at the same
 * instant and queueing on the server; renewing earlier is always safe, as a
 * lease counts from the send time. When the renewer
 * sends for a due guard it takes along every other guard due within the
 * next TTL/6, in one ExtendBatch (a single guard goes as a plain Extend), so
 * guards renewed together stay together. Each guard keeps its own outcome
 * and loss semantics (promise 5): extended=false poisons that guard alone;
 * an item the server could not decide is a failed renewal of that guard,
 * retried with the backoff like a failed call. A multi-key guard is renewed
 * by an Extend of its whole set (ExtendBatch items are single keys), with
 * the renewal's request id, the same on each retry of that renewal.
 *
 * A renewal holds its guard's lease-call slot (slot.ts) from when it is sent
 * until its outcome is applied and the guard rescheduled: an explicit
 * extend() of the guard waits for it, and a guard whose extend() is in
 * flight or waiting is looked at again BUSY_RETRY_MS later.
 */

import { Code, ConnectError, type Client as RpcClient } from "@connectrpc/connect";
import { fromConnectError } from "./connect-errors.js";
import { ServerError, UnavailableError, type HoldfastError } from "./errors.js";
import type { Lease, LockService } from "./gen/holdfast/lock/v1/lock_pb.js";
import type { Timestamp } from "./hlc.js";
import type { Settings } from "./options.js";
import type { CallSlot } from "./slot.js";
import { durationFromMs, monotonicNow, newRequestId, unref } from "./util.js";

/** What the renewer needs of the client's session. */
export interface RenewerSession {
  readonly rpc: Pick<RpcClient<typeof LockService>, "extend" | "extendBatch">;
  readonly clock: { now(): Timestamp };
  readonly settings: Pick<Settings, "requestTimeoutMs" | "backoff">;
  merge(p: Parameters<typeof Timestamp.fromProto>[0]): void;
}

/** The most leases one ExtendBatch carries (the server accepts 1000). */
const MAX_BATCH_ITEMS = 500;
/** A guard may be renewed up to TTL/RENEW_EARLY before it is due, to go with another guard's renewal. */
const RENEW_EARLY = 6;
/**
 * A client's phase f brings every first renewal of its guards f·TTL/PHASE_SPREAD
 * forward: the clients' first renewals are spread over a sixth of the TTL.
 */
const PHASE_SPREAD = 6;
/** When to look again at a due guard whose lease-call slot an extend() holds or waits for (as the Go SDK's busyRetry). */
const BUSY_RETRY_MS = 10;

/** What one renewal of a guard sends. */
export interface RenewalRequest {
  /** The lease's key, or every key of a multi-key lease. */
  target: { key: string } | { keys: string[] };
  ownerToken: string;
  ttlMs: number;
  remainingMs: number;
}

/** What the renewer needs of a guard (Guard implements it). */
export interface Renewable {
  readonly key: string;
  /** @internal One lease call of the guard at a time: a renewal takes it when sent and gives it back once applied. */
  readonly leaseCalls: CallSlot;
  /** @internal */ renewalRequest(): RenewalRequest | undefined;
  /** @internal The monotonic time of the next renewal: TTL/3 after the last successful one was sent. */
  renewalDue(): number;
  /** @internal The current TTL, ms. */
  readonly ttlMs: number;
  /** @internal Applies an answer; false when the guard ended. */
  renewalAnswered(extended: boolean, lease: Lease | undefined, sentAt: number, ttlMs: number): boolean;
  /** @internal A renewal got no answer for this guard: the time left to its local expiry. */
  renewalFailed(err: HoldfastError): number;
}

interface Entry {
  guard: Renewable;
  next: number;
  attempt: number;
  /** A renewal of it is under way: it holds the guard's lease-call slot. */
  inFlight: boolean;
  /** The request id of the renewal under way: drawn at its first attempt, kept on its retries. */
  requestId: string;
}

export class Renewer {
  readonly #session: RenewerSession;
  readonly #entries = new Map<Renewable, Entry>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;
  /** The server does not serve ExtendBatch (an older server answered unimplemented). */
  #single = false;
  /** Aborts every renewal in flight when the client closes. */
  readonly #closing = new AbortController();

  /** The client's renewal phase in [0,1): first renewals are due phase·TTL/6 before TTL/3. */
  readonly #phase: number;

  /** phase: drawn at random by default; a test may fix it. */
  constructor(session: RenewerSession, phase: number = Math.random()) {
    this.#session = session;
    this.#phase = phase;
  }

  /** Schedules g's first renewal: TTL/3 after its acquisition was sent, brought forward by phase·TTL/6. */
  add(g: Renewable): void {
    const first = g.renewalDue() - (this.#phase * g.ttlMs) / PHASE_SPREAD;
    const e: Entry = { guard: g, next: first, attempt: 0, inFlight: false, requestId: "" };
    this.#entries.set(g, e);
    this.#armAt(e.next);
  }

  /**
   * Stops renewing g; a renewal of it in flight is let go of (its slot given
   * back, so that an extend() waiting for it wakes) and ignored when it
   * answers.
   */
  remove(g: Renewable): void {
    const e = this.#entries.get(g);
    if (e) this.#letGo(e);
    this.#entries.delete(g);
    if (this.#entries.size === 0) this.#armAt(Infinity, true);
  }

  /**
   * After an explicit extend() (which held g's lease-call slot, so no
   * renewal of g is in flight): the next renewal is TTL/3 after it.
   */
  reschedule(g: Renewable): void {
    const e = this.#entries.get(g);
    if (!e || e.inFlight) return;
    e.next = g.renewalDue();
    e.attempt = 0;
    // An earlier timer finds nothing due and arms for the next one.
    this.#armAt(e.next);
  }

  /** Client.close: no more renewals; those in flight are aborted. */
  close(): void {
    for (const e of this.#entries.values()) this.#letGo(e);
    this.#entries.clear();
    this.#armAt(Infinity, true);
    this.#closing.abort(new UnavailableError("holdfast: the client closed"));
  }

  /**
   * Makes the one timer fire by at (monotonic ms): re-armed when at is
   * earlier than it was set for (or, with reset, whatever it was set for).
   * A timer that fires with nothing due arms for the next due guard.
   */
  #armAt(at: number, reset = false): void {
    if (at >= this.#timerAt && !reset) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = at;
    if (at === Infinity) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#timerAt = Infinity;
      this.#fire();
    }, Math.max(0, at - monotonicNow()));
    // A held guard alone does not keep a Node process alive.
    unref(this.#timer);
  }

  /**
   * Sends the renewals that are due: the first due guard's and those of
   * every guard due by the end of its own early window that falls within
   * the first one's. Then arms for the next due guard. A guard whose
   * extend() holds or waits for its lease-call slot is not renewed now: a
   * due one is looked at again BUSY_RETRY_MS later (the extend reschedules
   * it when answered).
   */
  #fire(): void {
    const now = monotonicNow();
    let first: Entry | undefined;
    for (const e of this.#entries.values()) {
      if (e.inFlight || e.next > now) continue;
      if (e.guard.leaseCalls.busy) e.next = now + BUSY_RETRY_MS;
      else if (!first || e.next < first.next) first = e;
    }
    const batch: Entry[] = [];
    if (first) {
      const horizon = now + first.guard.ttlMs / RENEW_EARLY;
      for (const e of this.#entries.values()) {
        if (e.inFlight || e.next > horizon || e.next > now + e.guard.ttlMs / RENEW_EARLY) continue;
        if (!e.guard.leaseCalls.tryTake()) continue; // an extend() of it holds or waits for the slot
        e.inFlight = true;
        batch.push(e);
      }
    }
    let next = Infinity;
    for (const e of this.#entries.values()) if (!e.inFlight && e.next < next) next = e.next;
    this.#armAt(next);
    for (let i = 0; i < batch.length; i += MAX_BATCH_ITEMS) void this.#renew(batch.slice(i, i + MAX_BATCH_ITEMS));
  }

  /** One renewal call for the entries of batch, and each one's outcome. */
  async #renew(batch: Entry[]): Promise<void> {
    const session = this.#session;
    const live: { e: Entry; req: RenewalRequest }[] = [];
    for (const e of batch) {
      const req = e.guard.renewalRequest();
      if (e.attempt === 0) e.requestId = newRequestId(); // a new renewal; its retries keep the id
      if (req) live.push({ e, req });
      else this.#done(e); // ended meanwhile
    }
    if (live.length === 0) return;
    // Each attempt is bounded by the lease with the least time left and by a
    // third of its TTL, so that a hung connection leaves every guard time
    // for another attempt.
    let bound = session.settings.requestTimeoutMs;
    for (const { req } of live) bound = Math.min(bound, Math.max(1, Math.min(req.remainingMs, req.ttlMs / 3)));
    const opts = { timeoutMs: Math.max(1, Math.ceil(bound)), signal: this.#closing.signal };
    const sentAt = monotonicNow();
    // ExtendBatch items are single keys: a multi-key lease renews by an
    // Extend of its set, beside the batch.
    const sets = live.filter((l) => "keys" in l.req.target);
    const singles = live.filter((l) => !("keys" in l.req.target));
    if (this.#single || singles.length <= 1) {
      await Promise.all(live.map((l) => this.#renewOne(l.e, l.req, sentAt, opts)));
      return;
    }
    await Promise.all([...sets.map((l) => this.#renewOne(l.e, l.req, sentAt, opts)), this.#renewBatch(singles, sentAt, opts)]);
  }

  /** One ExtendBatch for single-key guards, and each one's outcome. */
  async #renewBatch(live: { e: Entry; req: RenewalRequest }[], sentAt: number, opts: { timeoutMs: number; signal: AbortSignal }): Promise<void> {
    const session = this.#session;
    let res;
    try {
      res = await session.rpc.extendBatch(
        {
          items: live.map(({ e, req }) => ({ key: e.guard.key, ownerToken: req.ownerToken, ttl: durationFromMs(req.ttlMs), requestId: e.requestId })),
          clientStamp: session.clock.now().toProto(),
        },
        opts,
      );
    } catch (err) {
      if (ConnectError.from(err).code === Code.Unimplemented) {
        // An older server: plain Extends from now on.
        this.#single = true;
        const again = monotonicNow();
        await Promise.all(live.map((l) => this.#renewOne(l.e, l.req, again, opts)));
        return;
      }
      const e = fromConnectError(err, "renew (ExtendBatch)");
      for (const l of live) this.#failed(l.e, e);
      return;
    }
    session.merge(res.serverStamp);
    if (res.results.length !== live.length) {
      const e = new ServerError("holdfast: renew (ExtendBatch): answered a different number of results than leases sent", { code: "internal" });
      for (const l of live) this.#failed(l.e, e);
      return;
    }
    live.forEach(({ e, req }, i) => {
      const r = res.results[i];
      if (r.error) {
        const msg = `holdfast: renew ${JSON.stringify(e.guard.key)}: ${r.error.message}`;
        this.#failed(e, r.error.code === "unavailable" ? new UnavailableError(msg) : new ServerError(msg, { code: "internal" }));
        return;
      }
      session.merge(r.lease?.stamp);
      this.#answered(e, r.extended, r.lease, sentAt, req.ttlMs);
    });
  }

  /** One Extend of e's lease (its key, or its set of keys), with the renewal's request id. */
  async #renewOne(e: Entry, req: RenewalRequest, sentAt: number, opts: { timeoutMs: number; signal: AbortSignal }): Promise<void> {
    const session = this.#session;
    try {
      const res = await session.rpc.extend(
        { ...req.target, ownerToken: req.ownerToken, ttl: durationFromMs(req.ttlMs), clientStamp: session.clock.now().toProto(), requestId: e.requestId },
        opts,
      );
      session.merge(res.serverStamp);
      session.merge(res.lease?.stamp);
      this.#answered(e, res.extended, res.lease, sentAt, req.ttlMs);
    } catch (err) {
      const what = "keys" in req.target ? JSON.stringify(req.target.keys) : JSON.stringify(e.guard.key);
      this.#failed(e, fromConnectError(err, `renew ${what}`));
    }
  }

  /** Whether e is still scheduled (not removed while its renewal was in flight). */
  #current(e: Entry): boolean {
    return this.#entries.get(e.guard) === e;
  }

  /**
   * Applies e's renewal answer and reschedules it, then gives its slot back
   * (in that order: an extend() waiting for the slot must come after this
   * answer, or this older answer would overwrite the extend's).
   */
  #answered(e: Entry, extended: boolean, lease: Lease | undefined, sentAt: number, ttlMs: number): void {
    if (!this.#current(e)) return; // removed meanwhile: the slot was given back then
    if (!e.guard.renewalAnswered(extended, lease, sentAt, ttlMs)) {
      this.#done(e);
      return;
    }
    e.attempt = 0;
    e.next = e.guard.renewalDue();
    this.#armAt(e.next);
    this.#letGo(e);
  }

  /**
   * No answer for e's guard: retried with the backoff, until the local
   * expiry poisons the guard (a transient error never ends a lease that is
   * still valid).
   */
  #failed(e: Entry, err: HoldfastError): void {
    if (!this.#current(e)) return;
    const left = e.guard.renewalFailed(err);
    if (left <= 0) {
      this.#done(e);
      return;
    }
    e.next = monotonicNow() + Math.min(this.#session.settings.backoff.delay(e.attempt), left);
    e.attempt++;
    this.#armAt(e.next);
    this.#letGo(e);
  }

  #done(e: Entry): void {
    if (!this.#current(e)) return;
    this.#letGo(e);
    this.#entries.delete(e.guard);
  }

  /** Takes e out of flight and gives its guard's lease-call slot back (once: remove may have done it already). */
  #letGo(e: Entry): void {
    if (!e.inFlight) return;
    e.inFlight = false;
    e.guard.leaseCalls.give();
  }
}
