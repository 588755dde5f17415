// The client's watchdog renews its guards together (src/renewer.ts): calls
// per renewal period in proportion to the client, not to its leases; each
// guard keeps its own outcome. Against a real server (make test-sdk-ts).
import assert from "node:assert/strict";
import { describe, it, mock } from "node:test";
import { Code, ConnectError, createClient as createConnectClient, createRouterTransport, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { create } from "@bufbuild/protobuf";
import { BackoffPolicy } from "../src/backoff.js";
import { ExtendResponseSchema, Kind, LeaseSchema, LockService } from "../src/gen/holdfast/lock/v1/lock_pb.js";
import { Guard as GuardImpl } from "../src/guard.js";
import { Clock } from "../src/hlc.js";
import { LeaseLostError, LockReleasedError, UnavailableError, createClient, type Guard, type LeaseEvent } from "../src/node.js";
import { settingsFrom } from "../src/options.js";
import { Renewer, type Renewable, type RenewerSession } from "../src/renewer.js";
import { Session } from "../src/session.js";
import { CallSlot } from "../src/slot.js";
import { durationFromMs, monotonicNow, msFromDuration } from "../src/util.js";
import { addr, aborted, eventually, key, needsServer, recordingLogger } from "./helpers.js";

/** A client whose calls are counted by method; unimplemented makes it refuse ExtendBatch, as an older server would. */
function countingClient(counts: Map<string, number>, opts: { unimplemented?: boolean; onLeaseEvent?: (e: LeaseEvent) => void; tokens?: Map<string, string> } = {}) {
  const count: Interceptor = (next) => async (req) => {
    counts.set(req.method.name, (counts.get(req.method.name) ?? 0) + 1);
    if (opts.unimplemented && req.method.name === "ExtendBatch") throw new ConnectError("an older server (test)", Code.Unimplemented);
    const res = await next(req);
    if (opts.tokens && !res.stream && req.method.name === "Acquire") {
      const m = res.message as unknown as { acquired: boolean; lease?: { key: string; ownerToken: string } };
      if (m.acquired && m.lease) opts.tokens.set(m.lease.key, m.lease.ownerToken);
    }
    return res;
  };
  return createClient(addr!, { logger: recordingLogger(), interceptors: [count], onLeaseEvent: opts.onLeaseEvent });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("the client's watchdog", { skip: needsServer }, () => {
  it("renews all of a client's guards in a few ExtendBatch calls, not one Extend each", async () => {
    const counts = new Map<string, number>();
    const c = countingClient(counts);
    const ttl = 900;
    const gs: Guard[] = [];
    for (let i = 0; i < 40; i++) gs.push(await c.lock(key(`many-${i}`)).ttl(ttl).acquire());
    // Count the renewals only: an acquire answered after TTL/3 (a loaded
    // machine) confirms its lease with one Extend of its own.
    counts.clear();
    const start = performance.now();
    while (performance.now() - start < ttl + ttl / 6) {
      for (const g of gs) assert.ok(g.held, `guard ${g.key} lost while renewals succeed: ${String(g.lostError)}`);
      await sleep(10);
    }
    for (const g of gs) assert.ok(g.renewals >= 2, `guard ${g.key} renewed ${g.renewals} times`);
    assert.equal(counts.get("Extend") ?? 0, 0, "plain Extends to a server that batches");
    const batches = counts.get("ExtendBatch") ?? 0;
    assert.ok(batches > 0 && batches <= 12, `${batches} ExtendBatch calls for 40 guards over 3 periods`);
    for (const g of gs) await g.unlock();
    await c.close();
  });

  it("poisons only the guard whose lease the server no longer holds", async () => {
    const tokens = new Map<string, string>();
    const c = countingClient(new Map(), { tokens });
    const ttl = 900;
    const gs: Guard[] = [];
    for (let i = 0; i < 5; i++) gs.push(await c.lock(key(`reject-${i}`)).ttl(ttl).acquire());
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    assert.equal((await raw.release({ key: gs[2].key, ownerToken: tokens.get(gs[2].key)! })).released, true);
    const reason = await aborted(gs[2].signal, ttl / 3 + 1_000);
    assert.ok(reason instanceof LeaseLostError && reason.reason === "rejected", String(reason));
    const before = gs.map((g) => g.renewals);
    await eventually("the others renewed again", () => gs.every((g, i) => i === 2 || g.renewals > before[i]), ttl);
    for (const [i, g] of gs.entries()) if (i !== 2) assert.ok(g.held, `guard ${i} beside the rejected one`);
    for (const [i, g] of gs.entries()) if (i !== 2) await g.unlock();
    await c.close();
  });

  it("retries a renewal whose answer was lost with each item's request id, and renews a multi-key guard by its own Extend", async () => {
    const batches: Map<string, string>[] = []; // per ExtendBatch: key -> request id
    const extends_: { keys: string[]; requestId: string }[] = [];
    let lost = false;
    const record: Interceptor = (next) => async (req) => {
      if (req.method.name === "ExtendBatch") {
        const m = req.message as unknown as { items: { key: string; requestId: string }[] };
        batches.push(new Map(m.items.map((it) => [it.key, it.requestId])));
      }
      if (req.method.name === "Extend") {
        const m = req.message as unknown as { key: string; keys: string[]; requestId: string };
        extends_.push({ keys: m.keys.length > 0 ? [...m.keys] : [m.key], requestId: m.requestId });
      }
      const res = await next(req);
      if (req.method.name === "ExtendBatch" && !lost) {
        lost = true; // the server renewed; its answer never arrives
        throw new ConnectError("connection reset (test: the answer was lost)", Code.Unavailable);
      }
      return res;
    };
    const c = createClient(addr!, { logger: recordingLogger(), interceptors: [record] });
    const ttl = 900;
    const singles: Guard[] = [];
    for (let i = 0; i < 3; i++) singles.push(await c.lock(key(`lost-${i}`)).ttl(ttl).acquire());
    const set = await c.lock(key("lost-set-a"), key("lost-set-b")).ttl(ttl).acquire();
    await eventually("every guard renewed", () => [...singles, set].every((g) => g.renewals >= 1), 2 * ttl);
    for (const g of [...singles, set]) assert.ok(g.held, `guard ${g.key}`);
    assert.ok(batches.length >= 2, `${batches.length} ExtendBatch calls: want the lost one and its retry`);
    for (const g of singles) {
      const first = batches[0].get(g.key);
      assert.ok(first, `${g.key} in the first ExtendBatch with a request id`);
      const retry = batches.slice(1).find((b) => b.has(g.key))?.get(g.key) ?? extends_.find((e) => e.keys[0] === g.key)?.requestId;
      assert.equal(retry, first, `${g.key}: the retry of a renewal carries its request id`);
    }
    for (const b of batches) assert.ok(!b.has(set.keys[0]) && !b.has(set.keys[1]), "a multi-key guard in an ExtendBatch");
    const setRenewal = extends_.find((e) => e.keys.length === 2);
    assert.ok(setRenewal && setRenewal.requestId !== "", "the multi-key guard renewed by an Extend of its keys with a request id");
    for (const g of [...singles, set]) await g.unlock();
    await c.close();
  });

  it("renews each guard with its own Extend on a server without ExtendBatch", async () => {
    const counts = new Map<string, number>();
    const c = countingClient(counts, { unimplemented: true });
    const ttl = 600;
    const gs: Guard[] = [];
    for (let i = 0; i < 5; i++) gs.push(await c.lock(key(`old-${i}`)).ttl(ttl).acquire());
    await eventually("every guard renewed twice", () => gs.every((g) => g.renewals >= 2), 3 * ttl);
    for (const g of gs) assert.ok(g.held);
    assert.ok((counts.get("Extend") ?? 0) >= 10, `${counts.get("Extend")} Extends`);
    assert.ok((counts.get("ExtendBatch") ?? 0) <= 1, "ExtendBatch is tried once at most, then plain Extends");
    for (const g of gs) await g.unlock();
    await c.close();
  });
});

describe("the client's renewal phase", () => {
  it("brings every first renewal forward by phase·TTL/6: clients whose guards were acquired at the same moment renew them apart, each at sent + TTL/3 − phase·TTL/6", async () => {
    const ttlMs = 6_000;
    const slackMs = 500; // a timer's and a loaded machine's delay
    const cases = [
      { phase: 0, dueMs: 2_000 },
      { phase: 0.9, dueMs: 1_100 },
    ];
    const acquiredAt = monotonicNow(); // both guards' acquisitions were sent now
    const runs = cases.map(({ phase }) => {
      let sent!: (at: number) => void;
      const firstSent = new Promise<number>((resolve) => (sent = resolve));
      const session: RenewerSession = {
        rpc: {
          extend: () => {
            sent(monotonicNow());
            return Promise.resolve(create(ExtendResponseSchema, { extended: true }));
          },
          extendBatch: () => Promise.reject(new Error("one guard renews by Extend")),
        },
        clock: new Clock(),
        settings: { requestTimeoutMs: 10_000, backoff: BackoffPolicy.from() },
        merge: () => undefined,
      };
      let validFrom = acquiredAt;
      const guard: Renewable = {
        key: `phase-${phase}`,
        leaseCalls: new CallSlot(),
        ttlMs,
        renewalRequest: () => ({ target: { key: `phase-${phase}` }, ownerToken: "owner", ttlMs, remainingMs: validFrom + ttlMs - monotonicNow() }),
        renewalDue: () => validFrom + ttlMs / 3,
        renewalAnswered: (_extended, _lease, sentAt) => {
          validFrom = sentAt;
          return true;
        },
        renewalFailed: () => 0,
      };
      const renewer = new Renewer(session, phase);
      renewer.add(guard);
      return { renewer, firstSent };
    });
    // The renewer's timer does not keep the process alive (unref): this one does, until the test ends.
    const alive = setTimeout(() => undefined, 2 * ttlMs);
    try {
      for (const [i, { phase, dueMs }] of cases.entries()) {
        const after = (await runs[i].firstSent) - acquiredAt;
        // Never before it is due; later only by the timer's delay.
        assert.ok(after >= dueMs && after <= dueMs + slackMs, `phase ${phase}: first renewal sent ${after.toFixed(0)}ms after the acquisition, want ${dueMs}ms (+ ${slackMs}ms)`);
      }
    } finally {
      clearTimeout(alive);
      for (const { renewer } of runs) renewer.close();
    }
  });
});

describe("a renewal retry due at the local expiry", () => {
  it("is not sent, and the guard is lost once, even before its expiry timer runs", async () => {
    // A renewal that fails transiently is retried after the backoff, cut to
    // the time left: with a backoff longer than the lease, the retry is due
    // exactly at the local expiry. Then the lease has ended on our clock, so
    // the watchdog sends nothing at or after it and the guard is lost, once,
    // even when its expiry timer has not run yet (a busy event loop): cleared
    // here, so that only the watchdog can notice the expiry. The Go and
    // Python SDKs have the same test.
    const extends_: number[] = [];
    const transport = createRouterTransport(({ service }) => {
      service(LockService, {
        extend: () => {
          extends_.push(monotonicNow());
          throw new ConnectError("backend restarting (test)", Code.Unavailable);
        },
        release: () => ({ released: true }),
      });
    });
    const events: LeaseEvent[] = [];
    const hour = 3_600_000;
    const session = new Session(
      transport,
      settingsFrom({ backoff: { initial: hour, max: hour }, logger: recordingLogger(), onLeaseEvent: (e) => events.push(e) }, "holder"),
    );
    const ttlMs = 600;
    const lease = create(LeaseSchema, { key: "k", ownerToken: "owner", fencingToken: 1n, ttl: durationFromMs(ttlMs) });
    // The guard arms its expiry timer (for about the TTL) as it starts, and
    // the watchdog's timer (for TTL/3 or sooner): note the first to clear it.
    const armed = mock.method(globalThis, "setTimeout");
    let g: GuardImpl;
    try {
      g = GuardImpl.start(session, lease, "holder", monotonicNow(), true);
    } finally {
      armed.mock.restore();
    }
    const expiryTimers = armed.mock.calls.filter((c) => Number(c.arguments[1]) > ttlMs / 2);
    assert.equal(expiryTimers.length, 1, `timers armed by the guard: ${armed.mock.calls.map((c) => String(c.arguments[1])).join(", ")}ms`);
    clearTimeout(expiryTimers[0].result); // as if the timer had not had its turn yet
    const expiresAt = monotonicNow() + g.remainingMs();
    try {
      let reason: unknown;
      try {
        reason = await aborted(g.signal, ttlMs + 500);
      } catch {
        assert.fail(`guard not lost; ${extends_.length} renewals sent (want 1: the retry is due at the expiry)`);
      }
      assert.ok(monotonicNow() >= expiresAt, "lost before the local expiry");
      assert.ok(reason instanceof LeaseLostError && reason.reason === "expired", String(reason));
      assert.ok(reason.cause instanceof UnavailableError, `cause ${String(reason.cause)}`);
      await assert.rejects(g.unlock(), LeaseLostError);
    } finally {
      session.renewer.close(); // ends every renewal in flight
    }
    assert.equal(extends_.length, 1, `${extends_.length} renewals sent, want 1: the failed one, and no retry at the expiry`);
    assert.deepEqual(events.filter((e) => e.type === "lost").map((e) => e.reason), ["expired"]);
  });
});

/**
 * A guard on a fake server that holds its first Extend's answer until
 * answer() (every other Extend is answered at once, for the TTL asked),
 * acquired acquiredAgoMs before now with a 6s TTL, so that its first renewal
 * falls due as the test wants. sent: each Extend's TTL and arrival.
 */
function guardBesideAHeldExtend(acquiredAgoMs: number) {
  const sent: { ttlMs: number; at: number }[] = [];
  let answer!: () => void;
  const answerable = new Promise<void>((resolve) => (answer = resolve));
  let arrived!: () => void;
  const held = new Promise<void>((resolve) => (arrived = resolve));
  const transport = createRouterTransport(({ service }) => {
    service(LockService, {
      extend: async (req) => {
        sent.push({ ttlMs: msFromDuration(req.ttl), at: monotonicNow() });
        if (sent.length === 1) {
          arrived();
          await answerable;
        }
        return { extended: true, lease: { key: req.key, ownerToken: req.ownerToken, fencingToken: 1n, ttl: req.ttl } };
      },
      release: () => ({ released: true }),
    });
  });
  const session = new Session(transport, settingsFrom({ logger: recordingLogger() }, "holder"));
  const ttlMs = 6_000;
  const lease = create(LeaseSchema, { key: "k", ownerToken: "owner", fencingToken: 1n, ttl: durationFromMs(ttlMs) });
  const g = GuardImpl.start(session, lease, "holder", monotonicNow() - acquiredAgoMs, true);
  // The renewer's timer does not keep the process alive (unref): this one does, until the test ends.
  const alive = setTimeout(() => undefined, 4 * ttlMs);
  const end = () => {
    answer();
    clearTimeout(alive);
    session.renewer.close();
  };
  return { g, sent, held, answer, session, end };
}

/** A span long enough for a call that could overtake another to do so (observing an absence needs one). */
const overtakeSpanMs = 200;

describe("extend beside a renewal", () => {
  // One lease call of a guard at a time, as in the Go and Python SDKs
  // (docs/sdk-behaviour.md, "extend beside a renewal"). Before, an extend()
  // went beside a renewal in flight, and the renewal's older answer, applied
  // last, brought back its TTL (a local expiry later than the server's, had
  // the extend shortened the lease) and its schedule.
  it("waits for the renewal in flight to be answered and applied; the extend's TTL, expiry and schedule stand", async () => {
    // Acquired 1.9s ago with a 6s TTL: the first renewal is due (within 100ms).
    const { g, sent, held, answer, end } = guardBesideAHeldExtend(1_900);
    try {
      await held;
      assert.equal(sent[0].ttlMs, 6_000, "the held Extend is the watchdog's renewal");
      const extended = g.extend(3_000);
      await new Promise((r) => setTimeout(r, overtakeSpanMs));
      assert.equal(sent.length, 1, "extend() sent beside the renewal in flight");
      const answeredAt = monotonicNow();
      answer();
      await extended;
      assert.equal(sent.length, 2, `${sent.length} Extends: want the renewal and the extend`);
      assert.equal(sent[1].ttlMs, 3_000);
      assert.ok(sent[1].at >= answeredAt, "extend() sent before the renewal was answered");
      await eventually("both answers applied", () => g.renewals >= 2, 3_000);
      assert.equal(g.ttlMs, 3_000, "the renewal's older answer overwrote the extend's TTL");
      // The local expiry is never later than the server's: 3s after the extend arrived there.
      const expiresAt = monotonicNow() + g.remainingMs();
      assert.ok(expiresAt <= sent[1].at + 3_000, `local expiry ${(expiresAt - sent[1].at).toFixed(0)}ms after the extend, past its 3s TTL`);
      // The next renewal: TTL/3 of the extend's TTL after it, with that TTL.
      await eventually("the next renewal", () => sent.length >= 3, 3_000);
      assert.equal(sent[2].ttlMs, 3_000, "the watchdog renewed with the renewal's old TTL");
      const after = sent[2].at - sent[1].at;
      assert.ok(after >= 990 && after <= 1_500, `next renewal ${after.toFixed(0)}ms after the extend, want 1000ms (+ 500ms)`);
      await g.unlock();
    } finally {
      end();
    }
  });

  it("holds off the watchdog: a guard due while its extend() is in flight is renewed TTL/3 after the extend, with its TTL", async () => {
    // Acquired 2.5s ago with a 6s TTL: the first renewal is overdue.
    const { g, sent, held, answer, end } = guardBesideAHeldExtend(2_500);
    try {
      const extended = g.extend(3_000); // before the watchdog's timer has its turn
      await held;
      assert.equal(sent[0].ttlMs, 3_000, "the held Extend is the explicit one");
      await new Promise((r) => setTimeout(r, overtakeSpanMs));
      assert.equal(sent.length, 1, "a renewal sent beside the extend() in flight");
      answer();
      await extended;
      await eventually("the next renewal", () => sent.length >= 2, 3_000);
      assert.equal(sent[1].ttlMs, 3_000);
      const after = sent[1].at - sent[0].at;
      assert.ok(after >= 990 && after <= 1_500, `renewal ${after.toFixed(0)}ms after the extend, want 1000ms (+ 500ms)`);
      await g.unlock();
    } finally {
      end();
    }
  });

  it("wakes an extend() waiting for a renewal when unlock() lets go of it: the unlock does not wait, the extend throws LockReleasedError", async () => {
    const { g, sent, held, end } = guardBesideAHeldExtend(1_900);
    try {
      await held;
      const extended = g.extend(3_000);
      const start = monotonicNow();
      await g.unlock(); // the renewal is never answered
      // Waiting for the renewal would take its attempt's bound, 2s (TTL/3).
      const took = monotonicNow() - start;
      assert.ok(took < 1_000, `unlock() took ${took.toFixed(0)}ms beside a renewal in flight`);
      await assert.rejects(extended, LockReleasedError);
      assert.equal(sent.length, 1, "extend() sent after unlock()");
      assert.equal(g.renewals, 0, "the renewal's answer applied");
    } finally {
      end();
    }
  });

  it("wakes an extend() waiting for a renewal when the client closes: it is not sent beside the release, and throws LockReleasedError", async () => {
    const { g, sent, held, session, end } = guardBesideAHeldExtend(1_900);
    try {
      await held;
      const extended = g.extend(3_000);
      // What client.close() does: end the renewals, then close each guard.
      session.close();
      await Promise.all([...session.open].map((o) => o.closeForClient(1_000)));
      await assert.rejects(extended, LockReleasedError);
      assert.equal(sent.length, 1, "extend() sent beside the client's close");
    } finally {
      end();
    }
  });
});

describe("proclaim beside another lease call", () => {
  // A leadership's proclaim takes the guard's lease-call slot, as extend()
  // does and as the Go SDK's Proclaim does: two proclaims in flight together
  // could be answered in either order, and the value the guard shows would
  // then be the one the server replaced.
  it("sends a second proclaim only after the first is answered, and keeps the value the server kept", async () => {
    const sent: { value: string; at: number }[] = [];
    let answer!: () => void;
    const answerable = new Promise<void>((resolve) => (answer = resolve));
    let arrived!: () => void;
    const held = new Promise<void>((resolve) => (arrived = resolve));
    const transport = createRouterTransport(({ service }) => {
      service(LockService, {
        proclaim: async (req) => {
          sent.push({ value: req.value, at: monotonicNow() });
          if (sent.length === 1) {
            arrived();
            await answerable;
          }
          return { proclaimed: true };
        },
        release: () => ({ released: true }),
      });
    });
    const session = new Session(transport, settingsFrom({ logger: recordingLogger() }, "holder"));
    const lease = create(LeaseSchema, { key: "e", ownerToken: "owner", fencingToken: 1n, ttl: durationFromMs(6_000), kind: Kind.ELECTION, value: "v0" });
    const g = GuardImpl.start(session, lease, "holder", monotonicNow(), false);
    try {
      const first = g.proclaimValue("a");
      await held;
      const second = g.proclaimValue("b");
      await new Promise((r) => setTimeout(r, overtakeSpanMs));
      assert.equal(sent.length, 1, "the second proclaim was sent beside the first in flight");
      const answeredAt = monotonicNow();
      answer();
      await Promise.all([first, second]);
      assert.deepEqual(
        sent.map((s) => s.value),
        ["a", "b"],
      );
      assert.ok(sent[1].at >= answeredAt, "the second proclaim was sent before the first was answered");
      assert.equal(g.value, "b", "the guard shows a value the server replaced");
      await g.unlock();
    } finally {
      answer();
      session.renewer.close();
    }
  });
});
