/**
 * Semaphores and read-write locks: keys with more than one lease. Every key
 * has a kind and a limit, fixed by the server at the key's first grant, and
 * each grant holds some permits of that limit: a lock is limit 1, a
 * semaphore grant takes 1 to limit permits, an rwlock reader one permit and
 * a writer all of them (a lock is a mutex: kind "mutex"). So the three are one rule with different weights,
 * and a grant is a lease like a lock's (its own owner token, fencing token,
 * TTL, watchdog and poisoning): they share LockBuilder and Guard. This
 * module maps what a builder describes to the Acquire request and what a
 * lease or a state says back.
 */

import { InvalidArgumentError } from "./errors.js";
import { Kind as PbKind, Mode as PbMode, type Grant as PbGrant, type Lease, type LockState as PbLockState } from "./gen/holdfast/lock/v1/lock_pb.js";
import { Timestamp } from "./hlc.js";
import type { Grant, GrantMode, Kind } from "./types.js";
import { dateFromTimestamp, msFromDuration } from "./util.js";

/** What one acquisition asks to hold of its key: a lock, permits of a semaphore, or an rwlock share. */
export type Primitive =
  | { kind: "mutex"; permits?: number }
  | { kind: "semaphore"; limit: number; permits?: number }
  | { kind: "rwlock"; mode: GrantMode; permits?: number }
  | { kind: "election"; value: string; permits?: number };

/** A lock (a mutex): what client.lock() describes. */
export const LOCK: Primitive = { kind: "mutex" };

/** What a guard holds of its key, read from the lease the server granted. */
export interface Share {
  kind: Kind;
  limit: number;
  permits: number;
  mode: GrantMode;
}

const kinds: Partial<Record<PbKind, Kind>> = { [PbKind.SEMAPHORE]: "semaphore", [PbKind.RWLOCK]: "rwlock", [PbKind.ELECTION]: "election" };

/** The longest value an election's leader may carry, in bytes of UTF-8. */
export const MAX_VALUE_BYTES = 4096;

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Refuses, before anything is sent, a value the server would refuse, with
 * the server's words: longer than 4096 bytes of UTF-8, not UTF-8 (a lone
 * surrogate), or holding a NUL (which PostgreSQL's text cannot keep).
 */
export function checkValue(value: string): void {
  if (typeof value !== "string") throw new InvalidArgumentError(`holdfast: value: ${String(value)} is not a string`);
  const bytes = new TextEncoder().encode(value);
  if (bytes.length > MAX_VALUE_BYTES) throw new InvalidArgumentError(`holdfast: value: ${bytes.length} bytes exceeds the maximum ${MAX_VALUE_BYTES} bytes`);
  if (loneSurrogate.test(value)) throw new InvalidArgumentError("holdfast: value: must be valid UTF-8");
  const nul = bytes.indexOf(0);
  if (nul >= 0) throw new InvalidArgumentError(`holdfast: value: must not contain NUL (found at byte ${nul})`);
}

/** The SDK's name of a wire kind (unset and KIND_MUTEX are a mutex). */
export function kindFromProto(k: PbKind): Kind {
  return kinds[k] ?? "mutex";
}

const wholeNumber = (n: number): boolean => Number.isSafeInteger(n);

/**
 * Refuses, before anything is sent, a semaphore without a usable limit or
 * permits, permits on anything else, and several keys or a lock-delay for
 * anything but a lock. Throws InvalidArgumentError naming the field, the
 * value and the bound.
 */
export function checkPrimitive(p: Primitive, keys: readonly string[], lockDelayMs: number): void {
  if (p.kind === "semaphore") {
    if (!wholeNumber(p.limit) || p.limit < 1) {
      throw new InvalidArgumentError(`holdfast: limit: ${String(p.limit)}: a semaphore needs a limit of at least 1, a whole number (client.semaphore(key, limit))`);
    }
    const permits = p.permits ?? 1;
    if (!wholeNumber(permits)) throw new InvalidArgumentError(`holdfast: permits: ${String(permits)} is not a whole number`);
    if (permits < 1) throw new InvalidArgumentError(`holdfast: permits: ${String(permits)} is below 1: a grant takes 1 to the semaphore's limit (${String(p.limit)}) permits`);
    if (permits > p.limit) throw new InvalidArgumentError(`holdfast: permits: ${String(permits)} is above the semaphore's limit ${String(p.limit)}`);
  } else if (p.permits !== undefined) {
    throw new InvalidArgumentError(`holdfast: permits: only a semaphore takes permits (client.semaphore); this is a ${p.kind}`);
  }
  if (p.kind === "mutex") return;
  if (p.kind === "election") checkValue(p.value);
  if (keys.length > 1) throw new InvalidArgumentError(`holdfast: keys: a ${p.kind} is one key; only a lock takes several`);
  if (lockDelayMs > 0) throw new InvalidArgumentError(`holdfast: lockDelay: only a lock takes a lock-delay; this is a ${p.kind}`);
}

/** The Acquire fields of p: none for a lock (its request is a lock's as before kinds). */
export function requestFields(p: Primitive): { kind?: PbKind; limit?: number; permits?: number; mode?: PbMode; value?: string } {
  switch (p.kind) {
    case "mutex":
      return {};
    case "semaphore":
      return { kind: PbKind.SEMAPHORE, limit: p.limit, permits: p.permits ?? 1 };
    case "rwlock":
      return { kind: PbKind.RWLOCK, mode: p.mode === "shared" ? PbMode.SHARED : PbMode.EXCLUSIVE };
    case "election":
      return { kind: PbKind.ELECTION, value: p.value };
  }
}

/**
 * What the lease holds: its share of the key's limit (a mutex's is 1 of 1,
 * a reader's 1 of the reader capacity, a writer's all of it); every grant
 * but a reader's is exclusive. A server from before kinds says nothing:
 * a mutex.
 */
export function shareOf(lease: Lease): Share {
  const kind = kindFromProto(lease.kind);
  if (kind === "mutex" || kind === "election") return { kind, limit: 1, permits: 1, mode: "exclusive" };
  return { kind, limit: lease.limit, permits: Math.max(lease.permits, 1), mode: modeFromProto(lease.mode) };
}

const modeFromProto = (m: PbMode): GrantMode => (m === PbMode.SHARED ? "shared" : "exclusive");

/**
 * Whether the server granted what was asked: a server that does not know
 * kinds drops the fields and grants a lock, which must not pass for a
 * semaphore or an rwlock share.
 */
export function grantedAsAsked(p: Primitive, lease: Lease): boolean {
  return kindFromProto(lease.kind) === p.kind;
}

/** One lease held on a key as others see it (no owner token). */
export function grantFromProto(g: PbGrant): Grant {
  return {
    fencingToken: g.fencingToken,
    holder: g.holder,
    expiresAt: dateFromTimestamp(g.expiresAt),
    stamp: Timestamp.fromProto(g.stamp),
    permits: Math.max(g.permits, 1),
    mode: modeFromProto(g.mode),
    lockDelayMs: msFromDuration(g.lockDelay),
    value: g.value,
  };
}

/** The kind, limit, permits in use and holders of a key's state; a server without kinds says nothing: a mutex. */
export function stateShareFromProto(p: PbLockState): { kind: Kind; limit: number; permitsInUse: number; holders: Grant[] } {
  const kind = kindFromProto(p.kind);
  const holders = p.holders.map(grantFromProto);
  if (kind === "mutex") {
    return {
      kind,
      limit: 1,
      permitsInUse: 1,
      holders: holders.length > 0 ? holders : [
        {
          fencingToken: p.fencingToken,
          holder: p.holder,
          expiresAt: dateFromTimestamp(p.expiresAt),
          stamp: Timestamp.fromProto(p.stamp),
          permits: 1,
          mode: "exclusive",
          lockDelayMs: msFromDuration(p.lockDelay),
          value: "",
        },
      ],
    };
  }
  return { kind, limit: p.limit, permitsInUse: p.permitsInUse, holders };
}
