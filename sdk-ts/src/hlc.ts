/**
 * Hybrid Logical Clock (Kulkarni et al., "Logical Physical Clocks", 2014),
 * ported from holdfast's Go package proto/hlc so that every SDK orders events
 * the same way.
 *
 * A stamp never falls behind the physical clock of the node that issued it,
 * and a node that receives a stamp moves its own clock past it, so "happened
 * before" implies "smaller stamp". The client ticks its clock for every
 * request it sends (client_stamp) and merges every server_stamp it receives.
 *
 * Merging a remote stamp can move a clock any distance forward, so update()
 * refuses a stamp whose wall time is more than maxOffset ahead of the local
 * physical clock, without advancing the clock (as CockroachDB does; its
 * default max offset, 500 ms, is ours).
 */

import { create } from "@bufbuild/protobuf";
import { HlcTimestampSchema, type HlcTimestamp } from "./gen/holdfast/lock/v1/lock_pb.js";
import { HoldfastError } from "./holdfast-error.js";

/** How far ahead of the local clock a remote stamp may be, in milliseconds. */
export const DEFAULT_MAX_OFFSET_MS = 500;

const MAX_UINT32 = 0xffff_ffff;

/** One HLC reading. The zero stamp means "no stamp" and is before all others. */
export class Timestamp {
  static readonly ZERO = new Timestamp(0n, 0);

  /**
   * @param wallTimeNs nanoseconds since the Unix epoch
   * @param logical orders events within one wallTimeNs (uint32)
   */
  constructor(
    readonly wallTimeNs: bigint,
    readonly logical: number,
  ) {
    if (!Number.isInteger(logical) || logical < 0 || logical > MAX_UINT32) {
      throw new RangeError(`hlc: logical ${logical} is not a uint32`);
    }
  }

  isZero(): boolean {
    return this.wallTimeNs === 0n && this.logical === 0;
  }

  /** -1, 0 or +1 as this is before, equal to or after other. */
  compare(other: Timestamp): number {
    if (this.wallTimeNs !== other.wallTimeNs) return this.wallTimeNs < other.wallTimeNs ? -1 : 1;
    if (this.logical !== other.logical) return this.logical < other.logical ? -1 : 1;
    return 0;
  }

  before(other: Timestamp): boolean {
    return this.compare(other) < 0;
  }

  after(other: Timestamp): boolean {
    return this.compare(other) > 0;
  }

  equals(other: Timestamp): boolean {
    return this.compare(other) === 0;
  }

  /** The smallest stamp strictly after this one. */
  next(): Timestamp {
    if (this.logical === MAX_UINT32) return new Timestamp(this.wallTimeNs + 1n, 0);
    return new Timestamp(this.wallTimeNs, this.logical + 1);
  }

  toString(): string {
    return `${this.wallTimeNs}.${this.logical}`;
  }

  /** Wire form; the zero stamp becomes undefined (unset field). */
  toProto(): HlcTimestamp | undefined {
    if (this.isZero()) return undefined;
    return create(HlcTimestampSchema, { wallTimeNs: this.wallTimeNs, logical: this.logical });
  }

  /** Converts a wire stamp; undefined is the zero stamp. */
  static fromProto(p: HlcTimestamp | undefined): Timestamp {
    if (!p) return Timestamp.ZERO;
    return new Timestamp(p.wallTimeNs, p.logical);
  }

  static max(a: Timestamp, b: Timestamp): Timestamp {
    return a.before(b) ? b : a;
  }
}

/** Thrown by Clock.update for a remote stamp too far ahead of the local clock. */
export class ClockOffsetError extends HoldfastError {
  override readonly name = "ClockOffsetError";
  constructor(
    readonly remote: Timestamp,
    readonly aheadNs: bigint,
    readonly maxOffsetMs: number,
  ) {
    super(`holdfast: hlc: stamp ${remote.toString()} is ${aheadNs}ns ahead of the local clock, more than the max offset ${maxOffsetMs}ms`, {
      code: "clock_offset",
    });
  }
}

/** Physical clock: nanoseconds since the Unix epoch. */
export type PhysicalClock = () => bigint;

const systemClock: PhysicalClock = () => BigInt(Date.now()) * 1_000_000n;

/** A Hybrid Logical Clock. JavaScript is single-threaded: no locking needed. */
export class Clock {
  #last: Timestamp = Timestamp.ZERO;
  readonly #physical: PhysicalClock;
  readonly #maxOffsetNs: bigint;

  /**
   * @param physical the physical clock (default: Date.now in nanoseconds)
   * @param maxOffsetMs how far ahead a remote stamp may be (default 500;
   *   negative disables the check)
   */
  constructor(options: { physical?: PhysicalClock; maxOffsetMs?: number } = {}) {
    this.#physical = options.physical ?? systemClock;
    const maxOffsetMs = options.maxOffsetMs ?? DEFAULT_MAX_OFFSET_MS;
    this.#maxOffsetNs = maxOffsetMs < 0 ? -1n : BigInt(Math.round(maxOffsetMs * 1e6));
  }

  get maxOffsetMs(): number {
    return this.#maxOffsetNs < 0n ? -1 : Number(this.#maxOffsetNs) / 1e6;
  }

  /** Ticks the clock for a local or send event. */
  now(): Timestamp {
    const pt = this.#physical();
    this.#last = pt > this.#last.wallTimeNs ? new Timestamp(pt, 0) : this.#last.next();
    return this.#last;
  }

  /** The latest reading, without ticking. */
  last(): Timestamp {
    return this.#last;
  }

  /**
   * Merges a remote stamp (a receive event) and returns the new reading,
   * strictly after both remote and every earlier reading. A zero stamp only
   * ticks the clock. Throws ClockOffsetError, leaving the clock unchanged,
   * when remote is more than the max offset ahead of the physical clock.
   */
  update(remote: Timestamp): Timestamp {
    if (remote.isZero()) return this.now();
    const pt = this.#physical();
    if (this.#maxOffsetNs >= 0n && remote.wallTimeNs - pt > this.#maxOffsetNs) {
      throw new ClockOffsetError(remote, remote.wallTimeNs - pt, this.maxOffsetMs);
    }
    return this.#merge(pt, remote);
  }

  /** Merges a stamp from a trusted source without the max-offset check. */
  observe(remote: Timestamp): Timestamp {
    return this.#merge(this.#physical(), remote);
  }

  #merge(pt: bigint, remote: Timestamp): Timestamp {
    const last = this.#last;
    let wall = last.wallTimeNs;
    if (remote.wallTimeNs > wall) wall = remote.wallTimeNs;
    if (pt > wall) wall = pt;
    let next: Timestamp;
    if (wall === last.wallTimeNs && wall === remote.wallTimeNs) {
      next = Timestamp.max(last, remote).next();
    } else if (wall === last.wallTimeNs) {
      next = last.next();
    } else if (wall === remote.wallTimeNs) {
      next = remote.next();
    } else {
      next = new Timestamp(wall, 0);
    }
    this.#last = next;
    return next;
  }
}
