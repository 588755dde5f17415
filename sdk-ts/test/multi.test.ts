// Several keys as one lease, lock-delay, and request ids (the same on a
// call's retries), against a real `holdfast serve` on the memory backend
// (scripts/with-server.sh), and servers of the test's own for a backend
// without those capabilities.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { InvalidArgumentError, LeaseLostError, NotAcquiredError, ServerError, createClient, type Client, type KeyDelay, type LeaseEvent } from "../src/node.js";
import { startServer } from "../src/testing.js";
import { addr, eventually, holdfastBin, key, needsBinary, needsServer, recordingLogger } from "./helpers.js";

const quiet = { logger: recordingLogger() };

/** What a recording client saw of one RPC method: the request ids of every attempt. */
interface Seen {
  ids: string[];
}

/**
 * A client whose transport records the request id of every Acquire, Extend
 * and Release, and loses the answer to the first request of each method in
 * `lose`: the server acted on it, the client hears `unavailable` (a
 * connection cut after the request left).
 */
function recordingClient(lose: readonly string[] = []): { client: Client; seen: Record<string, Seen> } {
  const seen: Record<string, Seen> = { Acquire: { ids: [] }, Extend: { ids: [] }, Release: { ids: [] } };
  const toLose = new Set(lose);
  const rec: Interceptor = (next) => async (req) => {
    const s = seen[req.method.name];
    if (s) s.ids.push((req.message as unknown as { requestId: string }).requestId);
    const res = await next(req);
    if (toLose.delete(req.method.name)) throw new ConnectError("connection reset (test: the answer was lost)", Code.Unavailable);
    return res;
  };
  return { client: createClient(addr!, { ...quiet, interceptors: [rec] }), seen };
}

describe("several keys as one lease", { skip: needsServer }, () => {
  let client: Client;
  let other: Client;
  before(() => {
    client = createClient(addr!, { ...quiet, holder: "ts-multi-a" });
    other = createClient(addr!, { ...quiet, holder: "ts-multi-b" });
  });
  after(async () => {
    await client?.close();
    await other?.close();
  });

  it("takes the keys together or not at all, with a fencing token per key, and releases the set", async () => {
    const [a, b] = [key("multi-a"), key("multi-b")];
    const held = await other.lock(b).ttl("1m").acquire();
    assert.equal(await client.lock(a, b).ttl("1m").tryAcquire(), undefined, "a set with a held key is not acquired");
    const err = await client.lock(a, b).ttl("1m").wait(0).acquire().then(
      () => assert.fail("acquired a set with a held key"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof NotAcquiredError, String(err));
    assert.deepEqual(err.keys, [a, b]);
    assert.equal(err.current?.key, b, "names the held key");
    assert.equal(err.current?.holder, "ts-multi-b");
    assert.match(err.message, /held by "ts-multi-b"/);
    assert.equal(await client.inspect(a), undefined, "the free key was not taken by a set that did not acquire");
    await held.unlock();

    const g = await client.lock(b, a).ttl("1m").acquire();
    assert.deepEqual(g.keys, [b, a], "the keys in the order given");
    assert.equal(g.key, b);
    assert.throws(() => g.fencingToken(), (e: unknown) => e instanceof InvalidArgumentError && /fencingTokenFor/.test(e.message));
    for (const k of g.keys) {
      const st = await other.inspect(k);
      assert.equal(st?.fencingToken, g.fencingTokenFor(k), `${k}: the guard's token is the server's`);
      assert.equal(st?.holder, "ts-multi-a");
    }
    assert.throws(() => g.fencingTokenFor("not-a-key"), (e: unknown) => e instanceof InvalidArgumentError && /not a key of this lease/.test(e.message));
    await g.extend("2m");
    await g.unlock();
    for (const k of [a, b]) assert.equal(await other.inspect(k), undefined, `${k} still held after the set's unlock`);
    assert.throws(() => g.fencingTokenFor(a), /released/);
  });

  it("the watchdog renews the whole set", async () => {
    const events: LeaseEvent[] = [];
    const c = createClient(addr!, { ...quiet, onLeaseEvent: (e) => void events.push(e) });
    const [a, b] = [key("multi-renew-a"), key("multi-renew-b")];
    const g = await c.lock(a, b).ttl(300).acquire();
    // Three TTLs' worth of renewals: an unrenewed key would have expired.
    await eventually("three renewals", () => g.renewals >= 3, 5_000);
    assert.equal(g.held, true);
    for (const k of [a, b]) assert.ok(await other.inspect(k), `${k} expired under the watchdog`);
    const renewed = events.find((e) => e.type === "renewed");
    assert.deepEqual(renewed?.keys, [a, b], "lease events name every key");
    await g.unlock();
    await c.close();
  });

  it("a set granted after a server-side wait longer than its TTL is confirmed (an Extend of the set)", async () => {
    const [a, b] = [key("multi-late-a"), key("multi-late-b")];
    const held = await other.lock(b).ttl("10s").acquire();
    const ttl = 500;
    const waiting = client.lock(a, b).ttl(ttl).wait("5s").acquire();
    await eventually("the set to queue", async () => ((await other.inspect(b))?.waiters ?? 0) > 0);
    // The stimulus: keep the set queued for longer than its TTL.
    await new Promise((r) => setTimeout(r, ttl + 300));
    await held.unlock();
    const g = await waiting;
    assert.ok(g.held, String(g.lostError));
    const start = performance.now();
    await eventually("2 TTLs to pass", () => performance.now() - start > 2 * ttl);
    assert.ok(g.held, String(g.lostError));
    for (const k of [a, b]) assert.equal((await other.inspect(k))?.fencingToken, g.fencingTokenFor(k));
    await g.unlock();
  });

  it("acquire() and withLock take a list of keys too", async () => {
    const keys = [key("multi-list-a"), key("multi-list-b")];
    const value = await client.withLock(keys, { ttl: "10s" }, async (g) => {
      assert.deepEqual(g.keys, keys);
      return (await other.inspect(keys[1]))?.fencingToken === g.fencingTokenFor(keys[1]);
    });
    assert.equal(value, true);
    for (const k of keys) assert.equal(await other.inspect(k), undefined);
  });

  it("a key named twice is refused by the server with invalid_argument naming the claim", async () => {
    const k = key("multi-twice");
    await assert.rejects(client.lock(k, k).tryAcquire(), (e: unknown) => e instanceof InvalidArgumentError && /claims\[1\]\.key/.test(e.message));
  });
});

describe("lock-delay", { skip: needsServer }, () => {
  let client: Client;
  before(() => {
    client = createClient(addr!, { ...quiet, holder: "ts-delay" });
  });
  after(async () => {
    await client?.close();
  });

  it("after the lease expires, the key refuses new holders for the delay; waiters get it once it has passed", async () => {
    const k = key("delay");
    const delayMs = 1_000;
    const g = await client.lock(k).ttl(200).lockDelay(delayMs).noWatchdog().acquire();
    assert.equal((await client.inspect(k))?.lockDelayMs, delayMs, "inspect shows the lease's lock-delay");
    // Nobody renews it: it expires (locally first, then on the server).
    await eventually("the local expiry", () => !g.held, 5_000);
    const lostAt = performance.now();
    let delay: KeyDelay | undefined;
    await eventually("the key in its lock-delay", async () => {
      ({ delay } = await client.inspectDelay(k));
      return delay !== undefined;
    }, delayMs);
    assert.ok(delay && delay.remainingMs > 0 && delay.remainingMs <= delayMs, `remaining ${delay?.remainingMs}ms`);
    assert.equal(delay.key, k);

    assert.equal(await client.lock(k).tryAcquire(), undefined, "a try in the lock-delay");
    const err = await client.lock(k).wait(0).acquire().then(
      () => assert.fail("acquired in the lock-delay"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof NotAcquiredError, String(err));
    assert.equal(err.current, undefined);
    assert.equal(err.delay?.key, k);
    assert.match(err.message, /lock-delay/);

    const next = await client.lock(k).wait("10s").acquire();
    const waited = performance.now() - lostAt;
    assert.ok(waited >= delayMs - 100, `acquired ${waited}ms after the local expiry, within the delay ${delayMs}ms`);
    await next.unlock();
    await assert.rejects(g.unlock(), LeaseLostError);
  });

  it("a released lease leaves no lock-delay", async () => {
    const k = key("delay-released");
    const g = await client.lock(k).ttl("10s").lockDelay("30s").acquire();
    await g.unlock();
    const again = await client.lock(k).tryAcquire();
    assert.ok(again, "the key is free at once after a release");
    assert.deepEqual(await client.inspectDelay(k).then((i) => i.delay), undefined);
    await again.unlock();
  });

  it("a negative lockDelay is refused before sending, naming the field", async () => {
    await assert.rejects(client.lock(key("delay-neg")).lockDelay(-5).tryAcquire(), (e: unknown) => e instanceof InvalidArgumentError && /lockDelay/.test(e.message));
  });

  it("a lockDelay above the server's maximum is refused with invalid_argument", async () => {
    const info = await client.serverInfo();
    assert.ok(info.backend.maxLockDelayMs > 0, "memory keeps lock-delays");
    await assert.rejects(
      client.lock(key("delay-max")).lockDelay(info.backend.maxLockDelayMs + 1_000).tryAcquire(),
      (e: unknown) => e instanceof InvalidArgumentError && /lock_delay/.test(e.message),
    );
  });
});

describe("request ids", { skip: needsServer }, () => {
  it("an Acquire whose answer was lost is retried with the same id and answered with the lease it took", async () => {
    const { client, seen } = recordingClient(["Acquire"]);
    const keys = [key("rid-a"), key("rid-b")];
    const t0 = performance.now();
    // Without the id, the retry would queue behind its own orphan for its TTL.
    const g = await client.lock(...(keys as [string, string])).ttl("1m").wait("30s").acquire();
    assert.ok(performance.now() - t0 < 3_000, "the retry waited instead of being answered with its lease");
    const ids = seen.Acquire.ids;
    assert.equal(ids.length, 2, "the lost Acquire and its retry");
    assert.ok(ids[0] && ids[0].length >= 16, `request id ${JSON.stringify(ids[0])}`);
    assert.equal(ids[1], ids[0], "one id for the acquisition's attempts");
    await g.extend(); // the lease the server holds is the guard's
    await g.unlock();
    const second = await client.lock(key("rid-other")).ttl("10s").acquire();
    assert.notEqual(seen.Acquire.ids[2], ids[0], "every acquisition draws a fresh id");
    await second.unlock();
    await client.close();
  });

  it("a Release whose answer was lost is retried with the same id and confirmed", async () => {
    const { client, seen } = recordingClient(["Release"]);
    const k = key("rid-release");
    const g = await client.lock(k).ttl("1m").acquire();
    await g.unlock(); // not release_unconfirmed: the server recognised the repeat
    const ids = seen.Release.ids;
    assert.equal(ids.length, 2);
    assert.ok(ids[0]);
    assert.equal(ids[1], ids[0]);
    assert.equal(await client.inspect(k), undefined);
    await client.close();
  });

  it("an Extend whose answer was lost is retried with the same id; every extend draws a fresh one", async () => {
    const { client, seen } = recordingClient(["Extend"]);
    const g = await client.lock(key("rid-extend")).ttl("1m").noWatchdog().acquire();
    await g.extend();
    await g.extend();
    const ids = seen.Extend.ids;
    assert.equal(ids.length, 3, "the lost Extend, its retry, and the second extend");
    assert.ok(ids[0]);
    assert.equal(ids[1], ids[0]);
    assert.notEqual(ids[2], ids[0]);
    assert.equal(g.renewals, 2);
    await g.unlock();
    await client.close();
  });
});

describe("a server that takes one key per request", { skip: needsBinary }, () => {
  it("a multi-key lock is refused with unimplemented naming the capability", async () => {
    // --max-keys 1 leaves the server as a backend that takes one key per request.
    await using server = await startServer({ bin: holdfastBin, args: ["--max-keys", "1"] });
    const c = createClient(server.address, quiet);
    assert.equal((await c.serverInfo()).backend.maxKeys, 1);
    await assert.rejects(c.lock(key("cap-a"), key("cap-b")).tryAcquire(), (e: unknown) => {
      assert.ok(e instanceof ServerError, String(e));
      assert.equal(e.code, "unimplemented");
      assert.match(e.message, /CAPABILITY_MULTI_KEY/);
      return true;
    });
    const g = await c.lock(key("cap-one")).ttl("10s").acquire(); // a single key still works
    await g.unlock();
    await c.close();
  });
});
