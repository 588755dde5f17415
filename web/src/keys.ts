// The page's model of the keys held under its prefix: per key, every lease
// on it (each a Grant with its own fencing token), kept right as Watch
// events about single grants and List snapshots of whole keys interleave.
// Kind-agnostic and free of DOM and runtime imports, so it can be tested on
// its own (test/keys.test.mjs); main.ts renders it.
//
// Why a set of grants and not one LockState per key: a WatchResponse is
// about one grant of a key (its holders is that grant), so a release of one
// of a semaphore's three holders must leave the other two, and replacing the
// key's state by the event's would lose them.
import type { Grant, Kind, LockState } from "./gen.js";

/** What a Watch event says happened to its one grant. */
export type Change = "acquired" | "released" | "expired" | "proclaimed";

/** A key as the page shows it. */
export interface KeyView {
  readonly key: string;
  /** The key's kind and limit, as its latest state said. */
  kind: Kind;
  limit: number;
  /** Callers queued on the answering server, as its latest state said. */
  waiters: number;
  /** Every lease on the key, in fencing-token order. */
  holders: Grant[];
}

/** The permits a grant holds (at least 1, as the engine counts them). */
export function permitsOf(g: Grant): number {
  return Math.max(g.permits, 1);
}

/** The permits held on a key: the sum over its holders. */
export function inUse(v: KeyView): number {
  return v.holders.reduce((n, g) => n + permitsOf(g), 0);
}

const later = (a: Grant["expiresAt"], b: Grant["expiresAt"]): Grant["expiresAt"] => {
  if (!a) return b;
  if (!b) return a;
  return a.seconds > b.seconds || (a.seconds === b.seconds && a.nanos >= b.nanos) ? a : b;
};

// At most this many ended fencing tokens are remembered per key (a
// read-write lock can have 1024 readers ending at once).
const GONE_PER_KEY = 2048;

export class KeyTable {
  /** The held keys, by key. */
  readonly keys = new Map<string, KeyView>();
  // Fencing tokens known to have ended, per key: an acquired event or a List
  // entry naming one is stale (it was read before the end was).
  private gone = new Map<string, Set<bigint>>();

  /** Applies one Watch event about one grant of state.key. */
  apply(change: Change, s: LockState): void {
    for (const g of s.holders) {
      if (change === "released" || change === "expired") this.end(s.key, g.fencingToken);
      else this.upsert(s, g, change === "proclaimed");
    }
    const v = this.keys.get(s.key);
    if (v) v.waiters = s.waiters;
  }

  /**
   * Replaces the table by a List snapshot, then replays on top of it the
   * events that arrived while the List was in flight (pending, in order).
   * Grants seen ended before or during the List are left out of it: the
   * List may have been read before their end.
   */
  replace(states: readonly LockState[], pending: readonly { change: Change; state: LockState }[]): void {
    const prevGone = this.gone;
    this.gone = new Map();
    this.keys.clear();
    for (const s of states) {
      const ended = prevGone.get(s.key);
      const holders: Grant[] = [];
      for (const g of s.holders) {
        if (ended?.has(g.fencingToken)) {
          // Stale in this List; a List as stale would show it again.
          this.remember(s.key, g.fencingToken);
          continue;
        }
        holders.push(g);
      }
      if (holders.length === 0) continue;
      holders.sort(byToken);
      this.keys.set(s.key, { key: s.key, kind: s.kind, limit: Math.max(s.limit, 1), waiters: s.waiters, holders });
    }
    for (const e of pending) this.apply(e.change, e.state);
  }

  clear(): void {
    this.keys.clear();
    this.gone.clear();
  }

  private end(key: string, token: bigint): void {
    this.remember(key, token);
    const v = this.keys.get(key);
    if (!v) return;
    v.holders = v.holders.filter((g) => g.fencingToken !== token);
    if (v.holders.length === 0) this.keys.delete(key);
  }

  private remember(key: string, token: bigint): void {
    let set = this.gone.get(key);
    if (!set) this.gone.set(key, (set = new Set()));
    set.add(token);
    if (set.size > GONE_PER_KEY) {
      // Forget the oldest: the lowest tokens are the least likely to come back.
      const sorted = [...set].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      for (const t of sorted.slice(0, set.size - GONE_PER_KEY)) set.delete(t);
    }
  }

  // upsert adds grant g of state s, or updates the grant with its token.
  // proclaimed: g carries the leader's new value.
  private upsert(s: LockState, g: Grant, proclaimed: boolean): void {
    if (this.gone.get(s.key)?.has(g.fencingToken)) return;
    const limit = Math.max(s.limit, 1);
    let v = this.keys.get(s.key);
    if (v && (v.kind !== s.kind || v.limit !== limit)) {
      // A key changes kind or limit only once nobody holds it: whichever
      // side has the newer grant is the truth, the other has ended.
      const newest = v.holders.at(-1)?.fencingToken ?? -1n;
      if (g.fencingToken < newest) return;
      for (const h of v.holders) this.remember(s.key, h.fencingToken);
      this.keys.delete(s.key);
      v = undefined;
    }
    if (!v) {
      this.keys.set(s.key, { key: s.key, kind: s.kind, limit, waiters: s.waiters, holders: [g] });
      return;
    }
    const i = v.holders.findIndex((h) => h.fencingToken === g.fencingToken);
    if (i >= 0) {
      // Known already (from a List, or replayed): an acquired event is no
      // fresher than what is shown; a proclaimed one brings the value.
      // Extends only move expiry forward.
      const cur = v.holders[i];
      const next = proclaimed ? { ...g } : { ...cur };
      next.expiresAt = later(cur.expiresAt, g.expiresAt);
      v.holders[i] = next;
      return;
    }
    // Two grants that together exceed the limit were never held at once:
    // the one with the lower token ended before the other was granted (we
    // have not seen its end yet, or this event is the stale one).
    const clash = (h: Grant) => permitsOf(h) + permitsOf(g) > limit;
    if (v.holders.some((h) => h.fencingToken > g.fencingToken && clash(h))) {
      this.remember(s.key, g.fencingToken);
      return;
    }
    for (const h of v.holders) if (h.fencingToken < g.fencingToken && clash(h)) this.remember(s.key, h.fencingToken);
    v.holders = [...v.holders.filter((h) => !(h.fencingToken < g.fencingToken && clash(h))), g].sort(byToken);
  }
}

function byToken(a: Grant, b: Grant): number {
  return a.fencingToken < b.fencingToken ? -1 : a.fencingToken > b.fencingToken ? 1 : 0;
}
