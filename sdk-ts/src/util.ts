// Small helpers: durations, monotonic time, abortable sleeps.

import { create } from "@bufbuild/protobuf";
import { DurationSchema, timestampDate, type Duration, type Timestamp as PbTimestamp } from "@bufbuild/protobuf/wkt";

/** Milliseconds to a protobuf Duration. */
export function durationFromMs(ms: number): Duration {
  const ns = BigInt(Math.round(ms * 1e6));
  return create(DurationSchema, { seconds: ns / 1_000_000_000n, nanos: Number(ns % 1_000_000_000n) });
}

/** A protobuf Duration to milliseconds (undefined is 0). */
export function msFromDuration(d: Duration | undefined): number {
  if (!d) return 0;
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

export function dateFromTimestamp(t: PbTimestamp | undefined): Date | undefined {
  return t ? timestampDate(t) : undefined;
}

/** The client's monotonic clock, in milliseconds. */
export const monotonicNow = (): number => performance.now();

/** Keeps a timer from holding a Node process open (no-op in browsers). */
export function unref(t: ReturnType<typeof setTimeout>): void {
  const u = (t as unknown as { unref?: () => void }).unref;
  if (typeof u === "function") u.call(t);
}

/**
 * Resolves after ms, or early (with false) when signal aborts. Never rejects.
 * A background sleep (the watchdog's) is unref'd so that a held guard alone
 * does not keep a Node process alive; a sleep the caller awaits must not be,
 * or Node could exit while the caller waits.
 */
export function sleep(ms: number, signal?: AbortSignal, background = false): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(false);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    if (background) unref(timer);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * The holder label of this process: "hostname:pid" in Node (as the Go and
 * Python SDKs label theirs), "browser" where there is no process.
 */
export function defaultHolder(): string {
  const proc = (globalThis as { process?: Partial<NodeJS.Process> }).process;
  if (proc?.pid === undefined) return "browser";
  // getBuiltinModule (Node >= 20.16) reaches node:os without importing it,
  // so this module stays loadable in browsers.
  const os = proc.getBuiltinModule?.("node:os");
  return `${os?.hostname() || "unknown-host"}:${proc.pid}`;
}

/**
 * A fresh request id: 128 random bits, base64url (22 characters). One is
 * sent with every Acquire, Extend and Release, the same on each retry of
 * that one call, so that a retry whose first attempt's answer was lost is
 * answered as that attempt was (the same lease, a release confirmed).
 */
export function newRequestId(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
