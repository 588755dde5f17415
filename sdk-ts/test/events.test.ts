// Lease events, logs and the expiry margin (docs/sdk-behaviour.md, "Lease
// events and logs" and "The guard and the watchdog").
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { LockService } from "../src/gen/holdfast/lock/v1/lock_pb.js";
import { LeaseLostError, consoleLogger, createClient, type Client, type LeaseEvent } from "../src/node.js";
import { startServer, type TestServer } from "../src/testing.js";
import { aborted, addr, eventually, holdfastBin, key, needsBinary, needsServer, recordingLogger, spyingClient } from "./helpers.js";

describe("lease events and logs", { skip: needsServer }, () => {
  it("renewed and released reach the listener, at debug level in the logs", async () => {
    const events: LeaseEvent[] = [];
    const logger = recordingLogger();
    const c = createClient(addr!, { onLeaseEvent: (e) => events.push(e), logger });
    const k = key("events");
    const g = await c.lock(k).ttl(600).acquire();
    await eventually("two renewals", () => g.renewals >= 2);
    const renewed = events.filter((e) => e.type === "renewed");
    assert.ok(renewed.length >= 2);
    const first = renewed[0];
    assert.ok(first.type === "renewed");
    assert.equal(first.key, k);
    assert.equal(first.fencingToken, g.fencingToken());
    assert.equal(first.ttlMs, 600);
    assert.equal(first.renewals, 1);
    assert.ok(first.latencyMs >= 0 && first.latencyMs < 600);
    await g.unlock();
    assert.deepEqual(events.at(-1), { type: "released", key: k, fencingToken: g.lostError?.fencingToken ?? first.fencingToken });
    assert.ok(logger.lines.some((l) => l.level === "debug" && l.message === "lease renewed" && l.fields?.key === k));
    assert.ok(logger.lines.some((l) => l.level === "debug" && l.message === "lease released" && l.fields?.key === k));
    const loud = logger.lines.filter((l) => l.level === "warn" || l.level === "error");
    assert.deepEqual(loud.map((l) => l.message), []);
    await c.close();
  });

  it("lost carries the reason and the error, at warn level", async () => {
    const tokens = new Map<string, string>();
    const events: LeaseEvent[] = [];
    const logger = recordingLogger();
    const c = spyingClient(tokens, { onLeaseEvent: (e) => events.push(e), logger });
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    const k = key("events-lost");
    const g = await c.lock(k).ttl(600).acquire();
    const token = g.fencingToken();
    assert.equal((await raw.release({ key: k, ownerToken: tokens.get(k)! })).released, true);
    const reason = await aborted(g.signal, 2_000);
    const lost = events.find((e) => e.type === "lost");
    assert.ok(lost?.type === "lost", JSON.stringify(events.map((e) => e.type)));
    assert.equal(lost.reason, "rejected");
    assert.equal(lost.fencingToken, token);
    assert.equal(lost.error, reason);
    assert.ok(lost.error instanceof LeaseLostError);
    assert.ok(logger.lines.some((l) => l.level === "warn" && l.message === "lease lost" && l.fields?.reason === "rejected"));
    await c.close();
  });

  it("a listener that throws is logged and does not stop the watchdog", async () => {
    const logger = recordingLogger();
    const c = createClient(addr!, {
      logger,
      onLeaseEvent: () => {
        throw new Error("listener bug");
      },
    });
    const g = await c.lock(key("events-throw")).ttl(450).acquire();
    await eventually("three renewals despite the listener", () => g.renewals >= 3);
    assert.ok(g.held);
    const logged = logger.lines.find((l) => l.level === "error" && l.message === "onLeaseEvent listener threw");
    assert.ok(logged, JSON.stringify(logger.lines.map((l) => l.message)));
    assert.equal((logged.fields?.error as Error).message, "listener bug");
    await g.unlock();
    await c.close();
  });

  it("the default logger is the console's, warnings and errors only", () => {
    const seen: string[] = [];
    const saved = { debug: console.debug, info: console.info, warn: console.warn, error: console.error };
    for (const level of ["debug", "info", "warn", "error"] as const) console[level] = (msg: string) => void seen.push(`${level}:${msg}`);
    try {
      const warnOnly = consoleLogger();
      warnOnly.debug("a");
      warnOnly.info("b");
      warnOnly.warn("c");
      warnOnly.error("d");
      consoleLogger("debug").debug("e", { key: "k" });
    } finally {
      Object.assign(console, saved);
    }
    assert.deepEqual(seen, ["warn:holdfast: c", "error:holdfast: d", "debug:holdfast: e"]);
  });
});

describe("renewal failures and the expiry margin", { skip: needsBinary }, () => {
  let server: TestServer;
  let observer: Client;
  before(async () => {
    server = await startServer({ bin: holdfastBin });
    observer = createClient(server.address, { logger: recordingLogger() });
  });
  after(async () => {
    await observer?.close();
    await server?.stop();
  });

  it("renewal_failed reports a transient failure with the time left; the lease survives a short pause", async () => {
    const events: LeaseEvent[] = [];
    const logger = recordingLogger();
    const c = createClient(server.address, { onLeaseEvent: (e) => events.push(e), logger });
    const g = await c.lock(key("renewal-failed")).ttl("3s").acquire();
    await eventually("a first renewal", () => g.renewals >= 1);
    server.pause();
    try {
      await eventually("a renewal failure", () => events.some((e) => e.type === "renewal_failed"), 3_000);
    } finally {
      server.resume();
    }
    const failed = events.find((e) => e.type === "renewal_failed");
    assert.ok(failed?.type === "renewal_failed");
    assert.ok(failed.error instanceof Error && failed.error.message.includes("renew"), failed.error.message);
    assert.ok(failed.remainingMs > 0 && failed.remainingMs < 3_000, `remaining ${failed.remainingMs}`);
    assert.ok(logger.lines.some((l) => l.level === "warn" && l.message === "lease renewal failed"));
    const r = g.renewals;
    await eventually("renewals to resume", () => g.renewals > r, 3_000);
    assert.ok(g.held, String(g.lostError));
    await g.unlock();
    await c.close();
  });

  it("the guard is poisoned the expiry margin before the lease's end: the server still holds the key then", async () => {
    const events: LeaseEvent[] = [];
    // Margin 2000 × 0.1 + 300 = 500 ms: local expiry 1500 ms after the acquire was sent.
    const c = createClient(server.address, { expiryMargin: { driftFactor: 0.1, fixed: 300 }, onLeaseEvent: (e) => events.push(e), logger: recordingLogger() });
    const k = key("margin");
    const sent = performance.now();
    const g = await c.lock(k).ttl(2_000).noWatchdog().acquire();
    assert.ok(g.remainingMs() <= 1_500, `remaining ${g.remainingMs()} exceeds TTL minus the margin`);
    const token = g.fencingToken();
    const reason = await aborted(g.signal, 5_000);
    const lostAt = performance.now() - sent;
    assert.ok(reason instanceof LeaseLostError && reason.reason === "expired");
    assert.ok(lostAt >= 1_500 - 5, `poisoned after ${lostAt}ms, before the local expiry`);
    // The server granted the lease after `sent`: it cannot end, and nobody
    // else can be granted the key, before sent + 2000 ms.
    assert.ok(lostAt < 2_000, `poisoned only after ${lostAt}ms, when the store could already grant the key`);
    const st = await observer.inspect(k);
    if (performance.now() - sent < 2_000) assert.equal(st?.fencingToken, token, "the store still held the key after the guard was poisoned");
    assert.ok(events.some((e) => e.type === "lost" && e.reason === "expired"));
    await c.close();
  });
});
