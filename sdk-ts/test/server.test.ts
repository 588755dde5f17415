// Tests against a real `holdfast serve` (scripts/with-server.sh exports
// HOLDFAST_ADDR). They cover the promises of docs/promises.md (2 to 7) from
// the client's side.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { LockService } from "../src/gen/holdfast/lock/v1/lock_pb.js";
import { createClient as createWebClient } from "../src/index.js";
import {
  ClientClosedError,
  Clock,
  Guard,
  InvalidArgumentError,
  LeaseLostError,
  LockReleasedError,
  NotAcquiredError,
  Timestamp,
  createClient,
  validateWrite,
  type Client,
} from "../src/node.js";
import { awaitStopped } from "../src/testing.js";
import { aborted, addr, eventually, key, lossyReleaseClient, needsServer, recordingLogger, serverPid, spyingClient } from "./helpers.js";

const quiet = { logger: recordingLogger() };

describe("against a real server", { skip: needsServer }, () => {
  let client: Client;
  let other: Client;
  before(() => {
    client = createClient(addr!, { ...quiet, holder: "ts-test-a" });
    other = createClient(addr!, { ...quiet, holder: "ts-test-b" });
  });
  after(async () => {
    await client?.close();
    await other?.close();
  });

  it("acquires, reports contention with the holder, and releases", async () => {
    const k = key("basic");
    const g = await client.lock(k).ttl(5_000).acquire();
    assert.ok(g.held);
    assert.equal(await other.tryAcquire(k, { ttl: 5_000 }), undefined);
    await assert.rejects(other.acquire(k, { ttl: 5_000, wait: 0 }), (e: unknown) => {
      assert.ok(e instanceof NotAcquiredError, String(e));
      assert.equal(e.code, "not_acquired");
      assert.equal(e.current?.holder, "ts-test-a");
      assert.equal(e.current?.fencingToken, g.fencingToken());
      return true;
    });
    const st = await other.inspect(k);
    assert.equal(st?.fencingToken, g.fencingToken());
    await g.unlock();
    assert.equal(g.held, false);
    assert.throws(() => g.fencingToken(), LockReleasedError);
    assert.ok(g.signal.aborted);
    assert.equal(await other.inspect(k), undefined);
    await g.unlock(); // a second unlock after a successful one is a no-op success
  });

  it("promise 2: a stale holder's release is a no-op and never deletes the successor's lock", async () => {
    const k = key("token-compare");
    const stale = await client.lock(k).ttl(200).noWatchdog().acquire();
    await aborted(stale.signal, 2_000); // expired on the client's clock
    let successor: Guard | undefined;
    await eventually("the key to be free after the TTL", async () => {
      successor = await other.tryAcquire(k, { ttl: 10_000 });
      return successor !== undefined;
    });
    // unlock() of a lost lease rejects with the loss, never a quiet success
    // (etcd#22082), and its tidy-up release cannot touch the successor.
    const lost = await stale.unlock().then(
      () => assert.fail("unlock of a lost lease resolved"),
      (e: unknown) => e,
    );
    assert.ok(lost instanceof LeaseLostError, String(lost));
    assert.equal(lost.reason, "expired");
    assert.equal(lost.fencingToken, stale.lostError?.fencingToken);
    await assert.rejects(stale.unlock(), LeaseLostError, "and again on a second unlock");
    await assert.rejects(stale.extend(), LeaseLostError);
    const st = await client.inspect(k);
    assert.equal(st?.fencingToken, successor!.fencingToken(), "the successor still holds");
    await successor!.unlock();
  });

  it("unlock() of a lease released behind the guard's back rejects with reason rejected", async () => {
    const tokens = new Map<string, string>();
    const spying = spyingClient(tokens);
    const k = key("unlock-rejected");
    const g = await spying.lock(k).ttl(10_000).noWatchdog().acquire();
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    assert.equal((await raw.release({ key: k, ownerToken: tokens.get(k)! })).released, true);
    assert.ok(g.held, "the guard has not been told yet");
    const err = await g.unlock().then(
      () => assert.fail("unlock resolved although the server answered released=false"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof LeaseLostError, String(err));
    assert.equal(err.reason, "rejected");
    assert.equal(g.lostError, err);
    assert.ok(g.signal.aborted && g.signal.reason === err);
    assert.throws(() => g.fencingToken(), LeaseLostError);
    await assert.rejects(g.unlock(), (e: unknown) => e === err, "a later unlock reports the same loss");
    await spying.close();
  });

  it("extend() of a lease released behind the guard's back rejects with reason rejected and poisons it", async () => {
    const tokens = new Map<string, string>();
    const spying = spyingClient(tokens);
    const k = key("extend-rejected");
    const g = await spying.lock(k).ttl(10_000).noWatchdog().acquire();
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    assert.equal((await raw.release({ key: k, ownerToken: tokens.get(k)! })).released, true);
    const err = await g.extend().then(
      () => assert.fail("extend resolved although the server answered extended=false"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof LeaseLostError, String(err));
    assert.equal(err.reason, "rejected");
    assert.equal(g.held, false);
    await assert.rejects(g.unlock(), (e: unknown) => e === err);
    await spying.close();
  });

  it("without request ids, a retried release answered released=false after an attempt lost in transit reports release_unconfirmed", async () => {
    const c = lossyReleaseClient("after", { stripRequestIds: true });
    const k = key("release-unconfirmed");
    const g = await c.lock(k).ttl(10_000).acquire();
    const err = await g.unlock().then(
      () => assert.fail("unlock resolved on released=false"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof LeaseLostError, String(err));
    assert.equal(err.reason, "release_unconfirmed");
    assert.equal(await other.inspect(k), undefined, "the first attempt did release it");
    await c.close();
  });

  it("a release whose first attempt failed before reaching the server is retried and resolves", async () => {
    const c = lossyReleaseClient("before");
    const k = key("release-retried");
    const g = await c.lock(k).ttl(10_000).acquire();
    await g.unlock();
    assert.throws(() => g.fencingToken(), LockReleasedError);
    assert.equal(await other.inspect(k), undefined);
    await g.unlock(); // no-op
    await c.close();
  });

  it("withLock rejects with the LeaseLostError when the lease was lost under fn", async () => {
    const tokens = new Map<string, string>();
    const spying = spyingClient(tokens);
    const k = key("with-lost");
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    await assert.rejects(
      spying.withLock(k, { ttl: 10_000, watchdog: false }, async () => {
        assert.equal((await raw.release({ key: k, ownerToken: tokens.get(k)! })).released, true);
        return "done";
      }),
      (e: unknown) => e instanceof LeaseLostError && e.reason === "rejected",
    );
    await spying.close();
  });

  it("promise 3: a lease is held for its TTL and free again within TTL + granularity", async () => {
    const info = await client.serverInfo();
    const k = key("ttl");
    const ttl = 400;
    const sentAt = performance.now();
    const g = await client.lock(k).ttl(ttl).noWatchdog().acquire();
    // Held: others are refused while the TTL runs.
    assert.equal(await other.tryAcquire(k, { ttl: 1_000 }), undefined);
    let freeAt = 0;
    await eventually(
      "the lock to expire",
      async () => {
        const held = await other.inspect(k);
        if (held === undefined) freeAt = performance.now();
        return held === undefined;
      },
      ttl + info.backend.ttlGranularityMs + 2_000,
    );
    // The server granted the lease after we sent the request: it cannot have
    // expired before sentAt + ttl.
    assert.ok(freeAt - sentAt >= ttl, `freed after ${freeAt - sentAt}ms, before the ${ttl}ms TTL`);
    assert.ok(freeAt - sentAt <= ttl + info.backend.ttlGranularityMs + 1_000, `freed only after ${freeAt - sentAt}ms`);
    assert.equal(g.held, false, "the guard knows its lease ran out");
  });

  it("promise 3: TTL bounds are enforced with invalid_argument naming the field", async () => {
    const info = await client.serverInfo();
    const tooLong = info.backend.maxTtlMs * 2 || 1e12;
    await assert.rejects(client.acquire(key("bounds"), { ttl: tooLong }), (e: unknown) => {
      assert.ok(e instanceof InvalidArgumentError, String(e));
      assert.match(e.message, /ttl/);
      assert.equal(e.code, "invalid_argument");
      return true;
    });
    await assert.rejects(client.acquire("", { ttl: 1_000 }), (e: unknown) => e instanceof InvalidArgumentError && /key/.test(e.message));
  });

  it("promise 4: fencing tokens strictly increase over releases and takeovers after expiry", async () => {
    const k = key("fencing");
    const tokens: bigint[] = [];
    let watermark = 0n;
    for (let i = 0; i < 4; i++) {
      const g = await (i % 2 ? other : client).lock(k).ttl(5_000).acquire();
      tokens.push(g.fencingToken());
      watermark = validateWrite(g.fencingToken(), watermark);
      await g.unlock();
    }
    // Takeover after expiry.
    const old = await client.lock(k).ttl(150).noWatchdog().acquire();
    const oldToken = old.fencingToken();
    tokens.push(oldToken);
    let next: Guard | undefined;
    await eventually("takeover after expiry", async () => {
      next = await other.tryAcquire(k, { ttl: 5_000 });
      return next !== undefined;
    });
    tokens.push(next!.fencingToken());
    watermark = validateWrite(next!.fencingToken(), watermark);
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `tokens ${tokens.join(",")}`);
    // The stale holder's write is refused at the resource.
    assert.throws(() => validateWrite(oldToken, watermark));
    await next!.unlock();
  });

  it("promise 5: the watchdog keeps a lease for 3 TTLs", async () => {
    const k = key("watchdog");
    // Short enough to keep the suite fast, long enough that a loaded 2-core
    // machine's scheduling hiccups do not eat a whole renewal window.
    const ttl = 600;
    const start = performance.now();
    const g = await client.lock(k).ttl(ttl).acquire();
    await eventually("3 TTLs to pass", () => performance.now() - start > 3 * ttl + 100, 10_000);
    assert.ok(g.held, String(g.lostError));
    assert.ok(g.renewals >= 3, `only ${g.renewals} renewals in ${3 * ttl}ms`);
    const st = await other.inspect(k);
    assert.equal(st?.fencingToken, g.fencingToken(), "still the same lease on the server");
    assert.equal(await other.tryAcquire(k, { ttl: 1_000 }), undefined);
    await g.unlock();
  });

  it("promise 5: a renewal answering extended=false poisons the guard", async () => {
    const tokens = new Map<string, string>();
    const spying = spyingClient(tokens);
    const k = key("poison-refused");
    const g = await spying.lock(k).ttl(600).acquire();
    const token = tokens.get(k);
    assert.ok(token);
    // A rogue party releases the lease with the real token: the next renewal
    // answers extended=false.
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    assert.equal((await raw.release({ key: k, ownerToken: token })).released, true);
    const reason = await aborted(g.signal, 2_000);
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "rejected");
    assert.throws(() => g.fencingToken(), LeaseLostError);
    assert.equal(g.held, false);
    await assert.rejects(g.extend(), (e: unknown) => e === reason);
    await assert.rejects(g.unlock(), (e: unknown) => e === reason);
    await spying.close();
  });

  it("promise 5: no successful renewal before the lease's expiry poisons the guard (server paused)", { skip: serverPid === undefined ? "HOLDFAST_SERVER_PID unset" : false }, async () => {
    const k = key("poison-expired");
    const ttl = 500;
    const g = await client.lock(k).ttl(ttl).acquire();
    const token = g.fencingToken();
    process.kill(serverPid!, "SIGSTOP");
    let reason: unknown;
    try {
      awaitStopped(serverPid!);
      reason = await aborted(g.signal, 3 * ttl);
    } finally {
      process.kill(serverPid!, "SIGCONT");
    }
    assert.ok(reason instanceof LeaseLostError, String(reason));
    assert.equal(reason.reason, "expired");
    assert.throws(() => g.fencingToken(), LeaseLostError);
    // The lease may still look held on the server for a moment; a successor
    // gets a larger token once it has expired there.
    let next: Guard | undefined;
    await eventually("takeover after the pause", async () => {
      next = await other.tryAcquire(k, { ttl: 5_000 });
      return next !== undefined;
    });
    assert.ok(next!.fencingToken() > token);
    await next!.unlock();
  });

  it("promise 5: a server pause shorter than the lease does not drop it (transient errors are retried)", { skip: serverPid === undefined ? "HOLDFAST_SERVER_PID unset" : false }, async () => {
    const k = key("pause-short");
    const ttl = 2_000;
    const g = await client.lock(k).ttl(ttl).acquire();
    await eventually("a first renewal", () => g.renewals >= 1);
    const r0 = g.renewals;
    process.kill(serverPid!, "SIGSTOP");
    try {
      awaitStopped(serverPid!);
      // The stimulus, not a synchronisation: at least one renewal (every
      // ~667ms) meets the paused server.
      await new Promise((r) => setTimeout(r, 800));
    } finally {
      process.kill(serverPid!, "SIGCONT");
    }
    await eventually("renewals to resume", () => g.renewals > r0 + 1, 3_000);
    assert.ok(g.held, String(g.lostError));
    assert.equal((await other.inspect(k))?.fencingToken, g.fencingToken());
    await g.unlock();
  });

  it("promise 5: explicit extend renews; poisons on refusal", async () => {
    const k = key("extend");
    const g = await client.lock(k).ttl(1_000).noWatchdog().acquire();
    await g.extend(2_000);
    assert.equal(g.ttlMs, 2_000);
    assert.ok(g.remainingMs() > 1_000);
    await g.unlock();
    await assert.rejects(g.extend(), LockReleasedError);
  });

  it("promise 6: stamps increase along a key's holders and sit above the client's stamp", async () => {
    const k = key("hlc");
    const stamps: Timestamp[] = [];
    for (let i = 0; i < 3; i++) {
      const c = i % 2 ? other : client;
      const sent = c.clock.last();
      const g = await c.lock(k).ttl(5_000).acquire();
      assert.ok(g.stamp.after(sent), `lease stamp ${g.stamp.toString()} not after client stamp ${sent.toString()}`);
      assert.ok(!c.clock.last().before(g.stamp), "the client merged the server's stamps");
      stamps.push(g.stamp);
      await g.unlock();
    }
    for (let i = 1; i < stamps.length; i++) assert.ok(stamps[i].after(stamps[i - 1]), stamps.join(" "));
    // A client stamp far ahead of the server's clock moves the next lease past it.
    const info = await client.serverInfo();
    const ahead = BigInt(Math.floor(info.maxClockOffsetMs / 2)) * 1_000_000n;
    const skewed = createClient(addr!, { ...quiet, clock: new Clock({ physical: () => BigInt(Date.now()) * 1_000_000n + ahead }) });
    const sent = skewed.clock.now();
    const g = await skewed.lock(k).ttl(5_000).acquire();
    assert.ok(g.stamp.after(sent));
    assert.ok(g.stamp.after(stamps[stamps.length - 1]));
    await g.unlock();
    await skewed.close();
  });

  it("promise 6: a client stamp beyond the max offset is refused", async () => {
    const info = await client.serverInfo();
    const ahead = BigInt(Math.ceil(info.maxClockOffsetMs * 4 + 1_000)) * 1_000_000n;
    const skewed = createClient(addr!, { ...quiet, clock: new Clock({ physical: () => BigInt(Date.now()) * 1_000_000n + ahead }) });
    await assert.rejects(skewed.acquire(key("skew"), { ttl: 1_000 }), InvalidArgumentError);
    await skewed.close();
  });

  it("waits on the server for a release within the wait budget", async () => {
    const k = key("wait");
    const g = await client.lock(k).ttl(5_000).acquire();
    const waiting = other.lock(k).ttl(5_000).wait(5_000).acquire();
    await eventually("the waiter to queue", async () => ((await client.inspect(k))?.waiters ?? 0) > 0);
    await g.unlock();
    const g2 = await waiting;
    assert.ok(g2.fencingToken() > 0n);
    await g2.unlock();
    // A wait that runs out is NotAcquiredError, within the budget.
    const h = await client.lock(k).ttl(5_000).acquire();
    const t0 = performance.now();
    await assert.rejects(other.lock(k).ttl(5_000).wait(300).acquire(), NotAcquiredError);
    assert.ok(performance.now() - t0 >= 300, "the wait was honoured");
    assert.ok(performance.now() - t0 < 300 + 2_000);
    await h.unlock();
  });

  it("a lease granted after a server-side wait longer than its TTL is confirmed, not dead on arrival", async () => {
    const k = key("late-grant");
    const a = await client.lock(k).ttl(10_000).acquire();
    const ttl = 500;
    const waiting = other.lock(k).ttl(ttl).wait(5_000).acquire();
    await eventually("the waiter to queue", async () => ((await client.inspect(k))?.waiters ?? 0) > 0);
    // The stimulus: keep the waiter queued for longer than its TTL.
    await new Promise((r) => setTimeout(r, ttl + 300));
    await a.unlock();
    const b = await waiting;
    assert.ok(b.held, String(b.lostError));
    const start = performance.now();
    await eventually("2 TTLs to pass", () => performance.now() - start > 2 * ttl);
    assert.ok(b.held, String(b.lostError));
    assert.equal((await client.inspect(k))?.fencingToken, b.fencingToken());
    await b.unlock();
  });

  it("withLock releases on success and on throw; await using releases at scope end", async () => {
    const k = key("with");
    const v = await client.withLock(k, { ttl: 5_000 }, async (g) => {
      assert.equal((await other.inspect(k))?.fencingToken, g.fencingToken());
      return 42;
    });
    assert.equal(v, 42);
    assert.equal(await other.inspect(k), undefined);
    await assert.rejects(
      client.lock(k).ttl(5_000).run(() => {
        throw new Error("boom");
      }),
      /boom/,
    );
    assert.equal(await other.inspect(k), undefined);
    {
      await using g = await client.lock(k).ttl(5_000).acquire();
      assert.ok(g.held);
    }
    assert.equal(await other.inspect(k), undefined);
  });

  it("close() releases the guards still held; later calls throw ClientClosedError", async () => {
    const k = key("close");
    const c = createClient(addr!, quiet);
    const g = await c.lock(k).ttl(10_000).acquire();
    await c.close();
    assert.equal(g.held, false);
    assert.equal(await other.inspect(k), undefined, "released on close");
    await g.unlock(); // released by close: a no-op success
    await assert.rejects(c.acquire(k, { ttl: 1_000 }), ClientClosedError);
  });

  it("lists and watches locks", async () => {
    const prefix = key("list") + "/";
    const ac = new AbortController();
    const events: string[] = [];
    let synced!: () => void;
    const isSynced = new Promise<void>((r) => (synced = r));
    const watching = (async () => {
      for await (const ev of client.watch({ prefix }, { signal: ac.signal })) {
        if (ev.type === "synced") synced();
        else events.push(`${ev.type}:${ev.state?.key.slice(prefix.length)}`);
      }
    })();
    await isSynced;
    const a = await client.lock(prefix + "a").ttl(5_000).acquire();
    const b = await client.lock(prefix + "b").ttl(5_000).acquire();
    const listed = [];
    for await (const s of client.list(prefix, { pageSize: 1 })) listed.push(s.key.slice(prefix.length));
    assert.deepEqual(listed, ["a", "b"]);
    await a.unlock();
    await b.unlock();
    await eventually("four events", () => events.length >= 4);
    ac.abort();
    await watching;
    assert.deepEqual(events, ["acquired:a", "acquired:b", "released:a", "released:b"]);
  });

  it("speaks gRPC-Web and gRPC as well as Connect", async () => {
    for (const protocol of ["grpc-web", "grpc"] as const) {
      const c = createClient(addr!, { ...quiet, protocol });
      const g = await c.lock(key(protocol)).ttl(5_000).acquire();
      assert.ok(g.fencingToken() > 0n);
      await g.unlock();
      await c.close();
    }
  });

  it("the browser entry point (connect-web over fetch) works with Connect and gRPC-Web", async () => {
    for (const protocol of ["connect", "grpc-web"] as const) {
      const c = createWebClient(addr!, { ...quiet, protocol, holder: `web-${protocol}` });
      const k = key(`web-${protocol}`);
      const g = await c.lock(k).ttl(5_000).acquire();
      assert.equal((await other.inspect(k))?.holder, `web-${protocol}`);
      await g.unlock();
      await c.close();
    }
  });
});
