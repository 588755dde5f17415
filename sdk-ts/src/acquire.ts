/**
 * Taking a lease: the one acquisition loop behind acquire, tryAcquire,
 * withLock and runIfFree (docs/sdk-behaviour.md, "Acquiring").
 */

import { exhausted, fromConnectError, isTransient } from "./connect-errors.js";
import { checkNonNegative, checkTtl, checkWait, formatDuration } from "./duration.js";
import { ClientClosedError, HoldfastError, InvalidArgumentError, NotAcquiredError, ServerError } from "./errors.js";
import type { AcquireResponse, KeyDelay as PbKeyDelay, Lease, LockState as PbLockState } from "./gen/holdfast/lock/v1/lock_pb.js";
import { Guard, leaseTarget } from "./guard.js";
import { Timestamp } from "./hlc.js";
import type { AcquireOptions } from "./options.js";
import { LOCK, checkPrimitive, grantedAsAsked, kindFromProto, requestFields, stateShareFromProto, type Primitive } from "./primitives.js";
import type { Session } from "./session.js";
import type { KeyDelay, LockState } from "./types.js";
import { dateFromTimestamp, durationFromMs, monotonicNow, msFromDuration, newRequestId, sleep } from "./util.js";

export function lockStateFromProto(p: PbLockState | undefined): LockState | undefined {
  if (!p) return undefined;
  return {
    key: p.key,
    fencingToken: p.fencingToken,
    holder: p.holder,
    expiresAt: dateFromTimestamp(p.expiresAt),
    stamp: Timestamp.fromProto(p.stamp),
    waiters: p.waiters,
    lockDelayMs: msFromDuration(p.lockDelay),
    ...stateShareFromProto(p),
  };
}

export function keyDelayFromProto(p: PbKeyDelay | undefined): KeyDelay | undefined {
  if (!p) return undefined;
  return { key: p.key, until: dateFromTimestamp(p.until), remainingMs: msFromDuration(p.remaining) };
}

/** What an acquisition answers when its keys stayed held: the holder of one, or a key's lock-delay. */
export interface Held {
  current: LockState | undefined;
  delay: KeyDelay | undefined;
}

/** How an acquisition treats a held key: queue (for the wait, or until aborted), or answer after one attempt. */
export type Mode = "wait" | "try";

/**
 * Takes the lease on keys (one key, or several together: all or none, under
 * one lease), or a grant of a semaphore or rwlock key (primitive). Every
 * attempt of one acquisition carries the same request id:
 * an attempt whose answer was lost may have taken the lease, and the retry
 * is answered with it instead of waiting out its own orphan. Resolves to the guard, or to the holder's state
 * when the key stayed held (after one attempt for "try" and wait 0, else
 * for the whole wait). `unavailable` answers and timed-out attempts are
 * retried with the backoff for at most the retry budget in a row, and never
 * past a bounded wait; then it throws the `unavailable` error. An aborted
 * signal rejects with the signal's reason and cancels the server-side wait;
 * closing the client rejects with ClientClosedError.
 */
export async function acquireLease(session: Session, keys: readonly string[], options: AcquireOptions, mode: Mode, primitive: Primitive = LOCK): Promise<Guard | Held> {
  session.checkOpen();
  const [key = ""] = keys;
  const multi = keys.length > 1;
  const { settings } = session;
  const ttlMs = checkTtl(options.ttl ?? settings.defaultTtlMs);
  const marginMs = settings.margin.marginMs(ttlMs);
  if (marginMs >= (ttlMs * 2) / 3) {
    throw new InvalidArgumentError(
      `holdfast: ttl: ${formatDuration(ttlMs)} leaves no time to renew after the expiry margin ${formatDuration(marginMs)} (the margin must stay below 2/3 of the TTL)`,
    );
  }
  const waitMs = mode === "try" ? 0 : options.wait === undefined ? Infinity : checkWait(options.wait);
  const lockDelayMs = options.lockDelay === undefined ? 0 : checkNonNegative("lockDelay", options.lockDelay);
  checkPrimitive(primitive, keys, lockDelayMs);
  const holder = options.holder ?? settings.holder;
  const requestId = newRequestId();
  // The caller's signal, and the client's close: either ends the acquisition.
  const signal = options.signal ? AbortSignal.any([options.signal, session.closingSignal]) : session.closingSignal;
  const what = `acquire ${JSON.stringify(multi ? keys : key)}`;
  const target = multi ? { claims: keys.map((k) => ({ key: k })) } : { key };
  const deadline = monotonicNow() + waitMs;
  let current: LockState | undefined;
  let delay: KeyDelay | undefined;
  let failures = 0;
  let streakStart = 0;
  for (let answered = false; ; ) {
    signal.throwIfAborted();
    const left = deadline - monotonicNow();
    if (answered && left <= 0) return { current, delay };
    const serverWaitMs = waitMs === 0 ? 0 : Math.min(session.serverWaitCapMs(), Math.max(0, left));
    const budgetLeft = failures === 0 ? settings.retryBudgetMs : settings.retryBudgetMs - (monotonicNow() - streakStart);
    const sentAt = monotonicNow();
    let res: AcquireResponse;
    try {
      res = await session.rpc.acquire(
        {
          ...target,
          ttl: durationFromMs(ttlMs),
          wait: serverWaitMs > 0 ? durationFromMs(serverWaitMs) : undefined,
          holder,
          clientStamp: session.clock.now().toProto(),
          requestId,
          lockDelay: lockDelayMs > 0 ? durationFromMs(lockDelayMs) : undefined,
          ...requestFields(primitive),
        },
        { timeoutMs: Math.ceil(serverWaitMs) + session.attemptTimeoutMs(budgetLeft), signal },
      );
    } catch (e) {
      signal.throwIfAborted();
      const err = fromConnectError(e, what);
      // A wait the SDK chose (a chunk of a long or unbounded one) that the
      // server refused: ask again for at most the server's max_wait.
      if (err instanceof InvalidArgumentError && serverWaitMs > 0 && (await session.learnMaxWait(serverWaitMs))) continue;
      if (!isTransient(err)) throw err;
      // An acquire that failed in flight has an unknown outcome; if the
      // server did grant it, nobody renews that lease and it expires.
      if (failures++ === 0) streakStart = sentAt;
      // Retries end with the budget of consecutive failures, or with a
      // bounded wait, whichever comes first.
      const giveUpAt = Math.min(streakStart + settings.retryBudgetMs, waitMs > 0 ? deadline : Infinity);
      const retry = await session.backoffWithin(failures - 1, giveUpAt, signal);
      signal.throwIfAborted();
      if (!retry) throw exhausted(err, what, formatDuration(settings.retryBudgetMs));
      continue;
    }
    answered = true;
    failures = 0;
    session.merge(res.serverStamp);
    if (res.acquired) {
      if (!res.lease?.ownerToken || multi !== res.lease.keys.length > 0) {
        throw new ServerError(`holdfast: ${what}: acquired=true without a lease, owner token and its keys`, { code: "internal" });
      }
      session.merge(res.lease.stamp);
      if (!grantedAsAsked(primitive, res.lease)) await refuseGrant(session, res.lease, primitive, what);
      const validFrom = await confirm(session, res.lease, sentAt, what);
      if (validFrom !== undefined) {
        const guard = Guard.start(session, res.lease, holder, validFrom, options.watchdog ?? true);
        if (session.closed) {
          // Closed while the answer was on its way: give the lease back.
          await guard.closeForClient(settings.retryBudgetMs);
          throw new ClientClosedError();
        }
        return guard;
      }
      current = undefined;
      delay = undefined;
    } else {
      current = lockStateFromProto(res.current);
      delay = keyDelayFromProto(res.delayed);
    }
    if (waitMs === 0) return { current, delay };
    // The server answered before the wait ran out: its own wait cap ended
    // it, or the key was freed and taken again. Queue again; after an early
    // answer, spaced so as not to spin.
    if (monotonicNow() - sentAt < serverWaitMs / 2) {
      const pause = Math.min(settings.backoff.delay(0), Math.max(0, deadline - monotonicNow()));
      if (!(await sleep(pause, signal))) signal.throwIfAborted();
    }
  }
}

/**
 * A lease whose Acquire answer came late (after a server-side wait) started
 * on the server somewhere between sentAt and now: counting from sentAt,
 * little or none of it may be left. One Extend sent now establishes a fresh
 * local expiry. Resolves to the moment the lease is valid from, or to
 * undefined when it was lost before use.
 */
async function confirm(session: Session, lease: Lease, sentAt: number, what: string): Promise<number | undefined> {
  const ttlMs = msFromDuration(lease.ttl);
  if (monotonicNow() - sentAt < ttlMs / 3) return sentAt;
  const now = monotonicNow();
  try {
    const res = await session.rpc.extend(
      { ...leaseTarget(lease), ownerToken: lease.ownerToken, ttl: lease.ttl, clientStamp: session.clock.now().toProto(), requestId: newRequestId() },
      session.callOptions(ttlMs / 3),
    );
    session.merge(res.serverStamp);
    if (!res.extended) return undefined;
    session.merge(res.lease?.stamp);
    return now;
  } catch (e) {
    // Still valid on the safe clock: hand it out, the watchdog renews at once.
    if (monotonicNow() < sentAt + ttlMs - session.settings.margin.marginMs(ttlMs)) return sentAt;
    throw e instanceof HoldfastError ? e : fromConnectError(e, what);
  }
}

/**
 * A server that does not know kinds drops them and grants a lock: give that
 * lease back (best effort; it expires by itself otherwise) and fail, rather
 * than pass a lock off as a semaphore or rwlock grant.
 */
async function refuseGrant(session: Session, lease: Lease, primitive: Primitive, what: string): Promise<never> {
  try {
    await session.rpc.release(
      { ...leaseTarget(lease), ownerToken: lease.ownerToken, clientStamp: session.clock.now().toProto(), requestId: newRequestId() },
      session.callOptions(session.settings.requestTimeoutMs),
    );
  } catch {
    // Best effort: the lease expires on the server by itself.
  }
  throw new ServerError(
    `holdfast: ${what}: asked for a ${primitive.kind}, the server granted a ${kindFromProto(lease.kind)} (a server that does not know ${primitive.kind}s?)`,
    { code: "unimplemented" },
  );
}

/** acquire's answer: the guard, or NotAcquiredError with the holder's state (or a key's lock-delay). */
export async function acquireOrThrow(session: Session, keys: readonly string[], options: AcquireOptions, primitive: Primitive = LOCK): Promise<Guard> {
  const r = await acquireLease(session, keys, options, "wait", primitive);
  if (r instanceof Guard) return r;
  throw new NotAcquiredError(keys[0] ?? "", r.current, { keys, delay: r.delay });
}
