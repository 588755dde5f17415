// The rows of docs/sdk-behaviour.md, in TypeScript: defaults, try versus
// wait, cancellation, skip-if-held, durations, addresses, and calls against
// an unreachable server. Against real servers: the shared one of
// scripts/with-server.sh, and servers of the test's own (startServer).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createClient as createConnectClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { LockService } from "../src/gen/holdfast/lock/v1/lock_pb.js";
import {
  ClientClosedError,
  InvalidArgumentError,
  LeaseLostError,
  NotAcquiredError,
  UnavailableError,
  createClient,
  type Client,
  type Guard,
} from "../src/node.js";
import { startServer } from "../src/testing.js";
import { addr, closedPort, eventually, holdfastBin, key, needsBinary, needsServer, recordingLogger, spyingClient } from "./helpers.js";

const waitersOn = async (c: Client, k: string) => (await c.inspect(k))?.waiters ?? 0;

describe("acquiring (docs/sdk-behaviour.md)", { skip: needsServer }, () => {
  let a: Client;
  let b: Client;
  before(() => {
    a = createClient(addr!, { holder: "behaviour-a", logger: recordingLogger() });
    b = createClient(addr!, { holder: "behaviour-b", logger: recordingLogger() });
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  it("acquire with no wait set queues on the server until the key is released", async () => {
    const k = key("no-wait-queues");
    const held = await a.lock(k).ttl("5s").acquire();
    let settled = false;
    const waiting = b
      .lock(k)
      .ttl("5s")
      .acquire()
      .finally(() => (settled = true));
    await eventually("the waiter to queue on the server", async () => (await waitersOn(a, k)) === 1);
    assert.equal(settled, false, "an acquire with no wait must not give up while the key is held");
    await held.unlock();
    const g = await waiting;
    assert.ok(g.fencingToken() > 0n);
    await g.unlock();
  });

  it("an aborted acquire rejects with the signal's reason and leaves the server's queue at once", async () => {
    const k = key("abort");
    const held = await a.lock(k).ttl("10s").acquire();
    const ac = new AbortController();
    const waiting = b.lock(k).ttl("5s").signal(ac.signal).acquire();
    await eventually("the waiter to queue", async () => (await waitersOn(a, k)) === 1);
    const reason = new Error("shutting down");
    const t0 = performance.now();
    ac.abort(reason);
    await assert.rejects(waiting, (e: unknown) => e === reason);
    assert.ok(performance.now() - t0 < 1_000, "the abort took effect at once");
    await eventually("the waiter to leave the server's queue", async () => (await waitersOn(a, k)) === 0, 2_000);
    await held.unlock();
  });

  it("an acquire with an already aborted signal rejects with its reason before sending", async () => {
    const ac = new AbortController();
    ac.abort(new Error("too late"));
    await assert.rejects(a.lock(key("pre-aborted")).signal(ac.signal).acquire(), /too late/);
  });

  it("closing the client ends a waiting acquire with ClientClosedError", async () => {
    const k = key("close-ends-wait");
    const held = await a.lock(k).ttl("10s").acquire();
    const c = createClient(addr!, { logger: recordingLogger() });
    const waiting = c.lock(k).ttl("5s").acquire();
    await eventually("the waiter to queue", async () => (await waitersOn(a, k)) === 1);
    await c.close();
    await assert.rejects(waiting, (e: unknown) => e instanceof ClientClosedError && e.code === "client_closed");
    await eventually("the waiter to leave the server's queue", async () => (await waitersOn(a, k)) === 0, 2_000);
    await held.unlock();
  });

  it("wait(0) makes exactly one attempt: held answers the not-acquired error with the holder", async () => {
    const k = key("wait-zero");
    const held = await a.lock(k).ttl("5s").acquire();
    const t0 = performance.now();
    await assert.rejects(b.lock(k).wait(0).acquire(), (e: unknown) => {
      assert.ok(e instanceof NotAcquiredError, String(e));
      assert.equal(e.code, "not_acquired");
      assert.equal(e.current?.holder, "behaviour-a");
      assert.equal(e.current?.fencingToken, held.fencingToken());
      return true;
    });
    assert.ok(performance.now() - t0 < 2_000);
    await held.unlock();
  });

  it("a bounded wait fails with the not-acquired error after the wait, not before", async () => {
    const k = key("wait-bounded");
    const held = await a.lock(k).ttl("5s").acquire();
    const t0 = performance.now();
    await assert.rejects(b.lock(k).wait("400ms").acquire(), NotAcquiredError);
    const took = performance.now() - t0;
    assert.ok(took >= 400 && took < 2_400, `a 400ms wait gave up after ${took}ms`);
    await held.unlock();
  });

  it("tryAcquire makes one attempt, ignores wait(), and answers undefined when held", async () => {
    const k = key("try");
    const held = await a.lock(k).ttl("5s").acquire();
    const t0 = performance.now();
    assert.equal(await b.lock(k).wait("10s").tryAcquire(), undefined);
    assert.equal(await b.tryAcquire(k, { wait: "10s" }), undefined);
    assert.ok(performance.now() - t0 < 2_000, "tryAcquire queued");
    assert.equal(await waitersOn(a, k), 0);
    await held.unlock();
    const g = await b.lock(k).tryAcquire();
    assert.ok(g?.held);
    await g.unlock();
  });

  it("runIfFree skips fn when the key is held", async () => {
    const k = key("run-if-free-held");
    const held = await a.lock(k).ttl("5s").acquire();
    let called = false;
    const r = await b.lock(k).wait("10s").runIfFree(() => {
      called = true;
    });
    assert.deepEqual(r, { ran: false });
    assert.equal(called, false);
    await held.unlock();
  });

  it("runIfFree runs fn under the guard when free and releases after it", async () => {
    const k = key("run-if-free");
    const r = await b.lock(k).ttl("5s").runIfFree(async (g: Guard) => {
      assert.equal((await a.inspect(k))?.fencingToken, g.fencingToken());
      return "done";
    });
    assert.deepEqual(r, { ran: true, value: "done" });
    assert.equal(await a.inspect(k), undefined, "released after fn");
  });

  it("runIfFree reports a lease lost during fn as the lease-lost error", async () => {
    const tokens = new Map<string, string>();
    const spying = spyingClient(tokens, { logger: recordingLogger() });
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    const k = key("run-if-free-lost");
    await assert.rejects(
      spying.lock(k).ttl("10s").runIfFree(async () => {
        assert.equal((await raw.release({ key: k, ownerToken: tokens.get(k)! })).released, true);
      }),
      (e: unknown) => e instanceof LeaseLostError && e.reason === "rejected" && e.code === "lease_lost",
    );
    await spying.close();
  });

  it("durations take units: ttl(\"30s\") is a 30 s lease, wait(\"1.5s\") a 1.5 s wait", async () => {
    const k = key("units");
    const g = await a.lock(k).ttl("30s").acquire();
    assert.equal(g.ttlMs, 30_000);
    await g.extend("1m");
    assert.equal(g.ttlMs, 60_000);
    const t0 = performance.now();
    await assert.rejects(b.lock(k).wait("1.5s").acquire(), NotAcquiredError);
    assert.ok(performance.now() - t0 >= 1_500);
    await g.unlock();
  });

  it("a bare host:port address means http://host:port", async () => {
    const c = createClient(new URL(addr!).host, { logger: recordingLogger() });
    const g = await c.lock(key("host-port")).ttl("5s").acquire();
    await g.unlock();
    await c.close();
  });

  it("the guard reports its holder, TTL, remaining time and renewals", async () => {
    const k = key("accessors");
    const g = await a.lock(k).ttl("3s").holder("job-42").acquire();
    assert.equal(g.key, k);
    assert.equal(g.holder, "job-42");
    assert.equal((await b.inspect(k))?.holder, "job-42");
    assert.equal(g.ttlMs, 3_000);
    // The local expiry keeps the default margin (TTL/100 + 20 ms) before the lease's end.
    assert.ok(g.remainingMs() <= 3_000 - 50, `remaining ${g.remainingMs()}`);
    assert.equal(g.renewals, 0);
    await g.unlock();
    assert.equal(g.remainingMs(), 0);
  });
});

describe("a server whose --max-wait is shorter than the SDK's waits", { skip: needsBinary }, () => {
  it("an acquire with no wait set learns the server's max_wait and re-sends, staying queued until acquired", async () => {
    await using server = await startServer({ bin: holdfastBin, args: ["--max-wait", "1s"] });
    const quiet = { logger: recordingLogger() };
    const holder = createClient(server.address, quiet);
    let acquires = 0;
    const count: Interceptor = (next) => (req) => {
      if (req.method.name === "Acquire") acquires++;
      return next(req);
    };
    const waiter = createClient(server.address, { ...quiet, interceptors: [count] });
    const k = key("max-wait");
    const held = await holder.lock(k).ttl("10s").acquire();
    let settled = false;
    const waiting = waiter
      .lock(k)
      .ttl("5s")
      .acquire()
      .finally(() => (settled = true));
    // The first Acquire asks for 5 minutes and is refused; then each asks
    // for 1 s and is answered not-acquired after it: at least 3 re-sends.
    await eventually("the waiter to re-send past the server's max wait", () => acquires >= 4, 10_000);
    assert.equal(settled, false, "the waiter gave up");
    assert.equal((await waiter.serverInfo()).maxWaitMs, 1_000);
    await held.unlock();
    const g = await waiting;
    assert.ok(g.held);
    await g.unlock();
    await holder.close();
    await waiter.close();
  });
});

describe("validation before sending (docs/sdk-behaviour.md)", () => {
  // A client on a closed port: any error other than invalid_argument would
  // come from trying to send.
  let c: Client;
  before(async () => {
    c = createClient(`http://127.0.0.1:${await closedPort()}`, { retryBudget: "200ms", logger: recordingLogger() });
  });
  after(() => c?.close());

  const refused = (field: RegExp | string, message?: string) => (e: unknown) => {
    assert.ok(e instanceof InvalidArgumentError, String(e));
    assert.equal(e.code, "invalid_argument");
    if (typeof field === "string") assert.ok(e.message.includes(field), e.message);
    else assert.match(e.message, field);
    if (message !== undefined) assert.equal(e.message, message);
    return true;
  };

  it("a TTL below 100 ms is refused, naming the unit and the limit", async () => {
    await assert.rejects(c.lock("k").ttl(3).acquire(), refused(/ttl/, "holdfast: ttl: 3ms is below the SDK minimum 100ms (TypeScript durations are milliseconds)"));
    await assert.rejects(c.lock("k").ttl("50ms").tryAcquire(), refused(/ttl: "50ms" is below the SDK minimum 100ms/));
    await assert.rejects(c.lock("k").ttl(Infinity).acquire(), refused(/ttl: Infinity is not a finite duration/));
    await assert.rejects(c.lock("k").ttl("3 sec").acquire(), refused(/ttl: "3 sec" is not a duration/));
  });

  it("a negative or infinite wait is refused", async () => {
    await assert.rejects(c.lock("k").wait(-1).acquire(), refused(/wait: -1ms is negative/));
    await assert.rejects(c.lock("k").wait(Infinity).acquire(), refused(/wait: Infinity is not a finite duration/));
  });

  it("bad client options are refused by createClient", () => {
    assert.throws(() => createClient("127.0.0.1:1", { defaultTtl: 50 }), refused(/defaultTtl: 50ms is below the SDK minimum 100ms/));
    assert.throws(() => createClient("127.0.0.1:1", { retryBudget: 0 }), refused(/retryBudget/));
    assert.throws(() => createClient("127.0.0.1:1", { requestTimeout: "-1s" }), refused(/requestTimeout/));
    assert.throws(() => createClient("127.0.0.1:1", { expiryMargin: { driftFactor: 1.5 } }), refused(/driftFactor/));
    assert.throws(() => createClient("127.0.0.1:1", { backoff: { multiplier: 0.5 } }), refused(/multiplier/));
  });

  it("an address that is not http(s)://host:port or host:port is refused, naming it", () => {
    for (const bad of ["", "ftp://127.0.0.1:7410", "127.0.0.1", "http://", "http://user:pw@127.0.0.1:7410", "http://127.0.0.1:7410/?x=1"]) {
      assert.throws(() => createClient(bad), refused(`address ${JSON.stringify(bad)}`), bad);
    }
  });
});

describe("an unreachable server (docs/sdk-behaviour.md)", () => {
  it("acquire with no wait fails with unavailable after the default 5 s retry budget, not later and not hanging", async () => {
    const c = createClient(`http://127.0.0.1:${await closedPort()}`, { logger: recordingLogger() });
    const t0 = performance.now();
    await assert.rejects(c.lock("k").acquire(), (e: unknown) => e instanceof UnavailableError && e.code === "unavailable");
    const took = performance.now() - t0;
    assert.ok(took >= 4_000 && took < 7_000, `gave up after ${took}ms for the 5s budget`);
    await c.close();
  });

  it("every call fails with unavailable after the retry budget", async () => {
    const budget = 300;
    const c = createClient(`http://127.0.0.1:${await closedPort()}`, { retryBudget: budget, logger: recordingLogger() });
    const calls: [string, () => Promise<unknown>][] = [
      ["acquire (no wait)", () => c.lock("k").acquire()],
      ["acquire wait(0)", () => c.lock("k").wait(0).acquire()],
      ["acquire with a wait longer than the budget", () => c.lock("k").wait("1m").acquire()],
      ["tryAcquire", () => c.lock("k").tryAcquire()],
      ["runIfFree", () => c.lock("k").runIfFree(() => undefined)],
      ["inspect", () => c.inspect("k")],
      ["list", () => c.list("").next()],
      ["serverInfo", () => c.serverInfo()],
    ];
    for (const [what, call] of calls) {
      const t0 = performance.now();
      await assert.rejects(call(), (e: unknown) => e instanceof UnavailableError && e.code === "unavailable", what);
      const took = performance.now() - t0;
      assert.ok(took >= budget / 2 && took < budget + 2_000, `${what}: gave up after ${took}ms for a ${budget}ms budget`);
    }
    await c.close();
  });

  it("retries are spaced by the backoff: [d/2, d] for d = 50 ms doubling to 1 s, none cut short before giving up", async () => {
    const sent: number[] = [];
    const record: Interceptor = (next) => (req) => {
      sent.push(performance.now());
      return next(req);
    };
    const c = createClient(`http://127.0.0.1:${await closedPort()}`, { retryBudget: "2500ms", interceptors: [record], logger: recordingLogger() });
    const t0 = performance.now();
    await assert.rejects(c.inspect("k"), UnavailableError);
    const took = performance.now() - t0;
    await c.close();
    assert.ok(took >= 2_400 && took < 4_000, `gave up after ${took}ms for a 2.5s budget`);
    assert.ok(sent.length >= 5, `only ${sent.length} attempts`);
    for (let i = 1; i < sent.length; i++) {
      const d = Math.min(50 * 2 ** (i - 1), 1_000);
      const gap = sent[i] - sent[i - 1];
      // A refused connection fails in well under a millisecond; 2 ms covers timer rounding.
      assert.ok(gap >= d / 2 - 2, `pause ${i} was ${gap}ms, want at least ${d / 2}ms (d=${d}ms): ${sent.map((t) => Math.round(t - t0)).join(", ")}`);
    }
  });

  it("a bounded wait shorter than the budget bounds the retries", async () => {
    const c = createClient(`http://127.0.0.1:${await closedPort()}`, { logger: recordingLogger() });
    const t0 = performance.now();
    await assert.rejects(c.lock("k").wait("400ms").acquire(), UnavailableError);
    const took = performance.now() - t0;
    assert.ok(took >= 150 && took < 2_000, `gave up after ${took}ms for a 400ms wait`);
    await c.close();
  });
});

describe("a server that stops answering (docs/sdk-behaviour.md)", { skip: needsBinary }, () => {
  it("unlock fails with unavailable after the retry budget, the guard still holds, and a later unlock settles it", async () => {
    const server = await startServer({ bin: holdfastBin });
    try {
      const c = createClient(server.address, { retryBudget: "500ms", logger: recordingLogger() });
      const g = await c.lock(key("unlock-paused")).ttl("10s").noWatchdog().acquire();
      server.pause();
      const t0 = performance.now();
      try {
        await assert.rejects(g.unlock(), (e: unknown) => e instanceof UnavailableError && e.code === "unavailable");
      } finally {
        server.resume();
      }
      const took = performance.now() - t0;
      assert.ok(took >= 250 && took < 3_000, `gave up after ${took}ms for a 500ms budget`);
      assert.ok(g.held, "a release that was not answered leaves the guard holding until its expiry");
      // The unanswered attempts may have reached the server (they sat in
      // its socket while it was paused): then the key is free and the next
      // unlock learns released=false. That is not a proven loss: it must say
      // release_unconfirmed, never rejected; else it resolves.
      await g.unlock().catch((e: unknown) => {
        assert.ok(e instanceof LeaseLostError, String(e));
        assert.equal(e.reason, "release_unconfirmed");
      });
      assert.equal(g.held, false);
      await c.close();
    } finally {
      await server.stop();
    }
  });
});
