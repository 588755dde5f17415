/**
 * Leader election: a fourth kind of key ("election", docs/primitives.md).
 * One lease at a time, like a lock, whose holder is the leader; the lease
 * carries a value (what the leader is known by) that the leader replaces
 * with proclaim() and everyone reads with leader() and observe(); its
 * fencing token is the leader's term. A campaign is an acquisition
 * (waiting campaigners are served in arrival order), resigning is
 * unlocking, and the leadership is renewed by the client's one watchdog and
 * poisoned when lost, exactly as a lock's Guard.
 */

import { acquireOrThrow, lockStateFromProto } from "./acquire.js";
import { fromConnectError } from "./connect-errors.js";
import type { Duration } from "./duration.js";
import type { Leader as PbLeader } from "./gen/holdfast/lock/v1/lock_pb.js";
import type { Guard } from "./guard.js";
import { Timestamp } from "./hlc.js";
import type { AcquireOptions } from "./options.js";
import { checkValue } from "./primitives.js";
import type { Session } from "./session.js";
import { UnavailableError, type LeaseLostError } from "./errors.js";
import type { Leader, LockState, Observation } from "./types.js";
import { dateFromTimestamp } from "./util.js";

export function leaderFromProto(p: PbLeader): Leader {
  return { key: p.key, term: p.term, holder: p.holder, value: p.value, expiresAt: dateFromTimestamp(p.expiresAt), stamp: Timestamp.fromProto(p.stamp) };
}

/** The leader of a held election key, read from its state: its one holder. */
function leaderFromState(st: LockState): Leader {
  return { key: st.key, term: st.fencingToken, holder: st.holder, value: st.holders[0]?.value ?? "", expiresAt: st.expiresAt, stamp: st.stamp };
}

/**
 * Campaigns for the leadership of one key: `client.election(key)`, with the
 * lock builder's TTL, wait, holder and signal (the same defaults: the
 * client's TTL, no wait = queue until leader or aborted, wait 0 = one
 * attempt).
 */
export class ElectionBuilder {
  /** The election's key. */
  readonly key: string;
  readonly #session: Session;
  readonly #opts: AcquireOptions = {};

  private constructor(session: Session, key: string) {
    this.#session = session;
    this.key = key;
  }

  /** @internal use Client.election */
  static for(session: Session, key: string): ElectionBuilder {
    return new ElectionBuilder(session, key);
  }

  /** Leadership lease length: milliseconds or a string such as "30s" (at least 100 ms; default the client's defaultTtl). */
  ttl(ttl: Duration): this {
    this.#opts.ttl = ttl;
    return this;
  }
  /** Queue behind earlier campaigners for at most this long; 0 makes one attempt. Unset, campaign() queues until it leads or is aborted. */
  wait(wait: Duration): this {
    this.#opts.wait = wait;
    return this;
  }
  /** The label others see for the leadership. */
  holder(label: string): this {
    this.#opts.holder = label;
    return this;
  }
  /** Abort the campaign with this signal: campaign() rejects with its reason and leaves the server's queue at once. */
  signal(signal: AbortSignal): this {
    this.#opts.signal = signal;
    return this;
  }

  /**
   * Becomes the leader with value (0 to 4096 bytes of UTF-8), queueing
   * behind earlier campaigners as wait() says; rejects with
   * NotAcquiredError (carrying the current leader's state) when the wait
   * runs out, InvalidArgumentError for a bad value before anything is sent.
   */
  async campaign(value: string): Promise<Leadership> {
    const guard = await acquireOrThrow(this.#session, [this.key], { ...this.#opts }, { kind: "election", value });
    return Leadership.of(guard);
  }

  /** The current leader, or undefined when nobody leads (one read of the key). */
  async leader(): Promise<Leader | undefined> {
    const s = this.#session;
    s.checkOpen();
    const res = await s.retrying(`leader ${JSON.stringify(this.key)}`, (opts) => s.rpc.inspect({ key: this.key }, opts));
    s.merge(res.serverStamp);
    const st = res.held ? lockStateFromProto(res.state) : undefined;
    return st ? leaderFromState(st) : undefined;
  }

  /**
   * Streams the election's leader: first, once the server established the
   * stream, the current leader (or none), then one Observation per change
   * (a new leader, a new value, no leader). Two in a row never say the same
   * thing and terms never go back. Ends quietly when signal aborts; a
   * failure, the server ending the stream (UnavailableError: observe again)
   * or the client closing rejects.
   */
  async *observe(options: { signal?: AbortSignal } = {}): AsyncGenerator<Observation> {
    const s = this.#session;
    s.checkOpen();
    const signal = options.signal ? AbortSignal.any([options.signal, s.closingSignal]) : s.closingSignal;
    try {
      for await (const msg of s.rpc.observe({ key: this.key }, { signal })) {
        s.merge(msg.serverStamp);
        s.merge(msg.leader?.stamp);
        yield { leader: msg.leader ? leaderFromProto(msg.leader) : undefined, stamp: Timestamp.fromProto(msg.serverStamp) };
      }
    } catch (e) {
      if (options.signal?.aborted) return;
      s.checkOpen();
      throw fromConnectError(e, `observe ${JSON.stringify(this.key)}`);
    }
    if (options.signal?.aborted) return;
    s.checkOpen();
    throw new UnavailableError(`holdfast: observe ${JSON.stringify(this.key)}: the server ended the observation`);
  }
}

/**
 * A won campaign: the leadership's Guard (renewed by the client's watchdog,
 * poisoned when lost) seen as a leader. Supports
 * `await using lead = await client.election("k").campaign(v)`, which
 * resigns at the end of the block.
 */
export class Leadership {
  /** The guard underneath: its signal, held, remainingMs() and renewals are the leadership's. */
  readonly guard: Guard;

  private constructor(guard: Guard) {
    this.guard = guard;
  }

  /** @internal */
  static of(guard: Guard): Leadership {
    return new Leadership(guard);
  }

  /** The election's key. */
  get key(): string {
    return this.guard.key;
  }
  /** The label the leadership was campaigned with. */
  get holder(): string {
    return this.guard.holder;
  }
  /** The leadership's value: the campaign's, or the last proclaimed. */
  get value(): string {
    return this.guard.value;
  }
  /** Aborted, with a LeaseLostError (or LockReleasedError after resign()) as its reason, when the leadership ends. */
  get signal(): AbortSignal {
    return this.guard.signal;
  }
  /** True while this client believes it leads. */
  get held(): boolean {
    return this.guard.held;
  }
  /** Why the leadership was lost, if it was. */
  get lostError(): LeaseLostError | undefined {
    return this.guard.lostError;
  }
  /** HLC stamp of the leadership's acquisition. */
  get stamp(): Timestamp {
    return this.guard.stamp;
  }

  /**
   * The leadership's term (its fencing token): strictly larger than every
   * earlier leader's. Throws LeaseLostError once lost, LockReleasedError
   * after resign().
   */
  term(): bigint {
    return this.guard.fencingToken();
  }

  /**
   * Replaces the leadership's value if it still leads; the term, TTL and
   * stamp stay. Rejects with the LeaseLostError (poisoning the leadership,
   * reason "rejected") when the server answers that it no longer leads,
   * with LockReleasedError after resign(), with InvalidArgumentError for a
   * bad value (nothing sent). `unavailable` is retried within the retry
   * budget and the local expiry.
   */
  async proclaim(value: string): Promise<void> {
    checkValue(value);
    await this.guard.proclaimValue(value);
  }

  /** Gives the leadership up (the guard's unlock()): resolves only when the server confirmed; rejects with the LeaseLostError when it was already lost. */
  resign(): Promise<void> {
    return this.guard.unlock();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
  }
}
