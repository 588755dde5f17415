// Semaphores and read-write locks: the same builder and Guard as a lock.
// Validation needs no server (nothing is sent); the rest runs against a
// real `holdfast serve` on the memory backend (scripts/with-server.sh).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createClient as createConnectClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Kind as PbKind, LockService } from "../src/gen/holdfast/lock/v1/lock_pb.js";
import { InvalidArgumentError, LeaseLostError, NotAcquiredError, ServerError, createClient, type Client, type Guard, type LockBuilder, type LockEvent, type LockState } from "../src/node.js";
import { addr, closedPort, eventually, key, needsServer, recordingLogger } from "./helpers.js";

const quiet = { logger: recordingLogger() };

/** Every RPC a client sends, by method name. */
function counting(): { sent: string[]; interceptor: Interceptor } {
  const sent: string[] = [];
  return {
    sent,
    interceptor: (next) => (req) => {
      sent.push(req.method.name);
      return next(req);
    },
  };
}

describe("semaphore and rwlock validation, before anything is sent", () => {
  let c: Client;
  const count = counting();
  before(async () => {
    c = createClient(`http://127.0.0.1:${await closedPort()}`, { ...quiet, interceptors: [count.interceptor] });
  });
  after(async () => {
    await c.close();
  });

  const refused: [string, () => LockBuilder, RegExp][] = [
    ["a limit of 0", () => c.semaphore("k", 0), /^holdfast: limit: 0: a semaphore needs a limit of at least 1/],
    ["a negative limit", () => c.semaphore("k", -2), /^holdfast: limit: -2: /],
    ["a fractional limit", () => c.semaphore("k", 2.5), /^holdfast: limit: 2.5: .*whole number/],
    ["0 permits", () => c.semaphore("k", 3).permits(0), /^holdfast: permits: 0 is below 1: a grant takes 1 to the semaphore's limit \(3\) permits/],
    ["permits above the limit", () => c.semaphore("k", 3).permits(4), /^holdfast: permits: 4 is above the semaphore's limit 3$/],
    ["fractional permits", () => c.semaphore("k", 3).permits(1.5), /^holdfast: permits: 1.5 is not a whole number$/],
    ["permits on a lock", () => c.lock("k").permits(1), /^holdfast: permits: only a semaphore takes permits \(client.semaphore\); this is a mutex$/],
    ["permits on a reader", () => c.rwlock("k").read().permits(1), /this is a rwlock$/],
    ["permits on a writer", () => c.rwlock("k").write().permits(2), /this is a rwlock$/],
    ["a lock-delay on a semaphore", () => c.semaphore("k", 2).lockDelay("1s"), /^holdfast: lockDelay: only a lock takes a lock-delay; this is a semaphore$/],
    ["a lock-delay on an rwlock", () => c.rwlock("k").write().lockDelay("1s"), /^holdfast: lockDelay: only a lock takes a lock-delay; this is a rwlock$/],
  ];
  for (const [what, builder, message] of refused) {
    it(`refuses ${what} with invalid_argument, in acquire, tryAcquire and runIfFree`, async () => {
      for (const call of [() => builder().acquire(), () => builder().tryAcquire(), () => builder().runIfFree(() => assert.fail("ran"))]) {
        await assert.rejects(call(), (e: unknown) => e instanceof InvalidArgumentError && e.code === "invalid_argument" && message.test(e.message));
      }
      assert.deepEqual(count.sent, [], "nothing was sent");
    });
  }

  it("the builders say what they take", () => {
    assert.equal(c.lock("k").kind, "mutex");
    assert.equal(c.semaphore("k", 3).kind, "semaphore");
    assert.equal(c.rwlock("k").read().kind, "rwlock");
    assert.equal(c.rwlock("cfg").key, "cfg");
  });
});

describe("semaphores", { skip: needsServer }, () => {
  let a: Client;
  let b: Client;
  before(() => {
    a = createClient(addr!, { ...quiet, holder: "ts-sem-a" });
    b = createClient(addr!, { ...quiet, holder: "ts-sem-b" });
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  it("grants permits up to the limit, each a lease with its own increasing fencing token, and refuses beyond it", async () => {
    const k = key("sem");
    const two = await a.semaphore(k, 3).permits(2).ttl("10s").acquire();
    assert.deepEqual([two.kind, two.limit, two.permits, two.mode], ["semaphore", 3, 2, "exclusive"]);
    const one = await b.semaphore(k, 3).ttl("10s").acquire();
    assert.equal(one.permits, 1, "permits default to 1");
    assert.ok(one.fencingToken() > two.fencingToken(), "fencing tokens increase over the grants of a key");

    assert.equal(await b.semaphore(k, 3).tryAcquire(), undefined, "a 4th permit of 3 is not granted");
    const err = await b.semaphore(k, 3).wait(0).acquire().then(
      () => assert.fail("acquired a 4th permit of 3"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof NotAcquiredError, String(err));
    assert.equal(err.current?.kind, "semaphore");
    assert.equal(err.current?.limit, 3);
    assert.equal(err.current?.permitsInUse, 3);
    assert.deepEqual(err.current?.holders.map((h) => [h.holder, h.permits, h.fencingToken]), [
      ["ts-sem-a", 2, two.fencingToken()],
      ["ts-sem-b", 1, one.fencingToken()],
    ]);
    assert.match(err.message, /^holdfast: lock ".*" not acquired: semaphore with 3 of 3 permits in use by 2 holders$/);

    const st = await a.inspect(k);
    assert.equal(st?.permitsInUse, 3);
    assert.equal(st?.holders.length, 2);

    await two.unlock();
    const again = await b.semaphore(k, 3).permits(2).ttl("10s").tryAcquire();
    assert.ok(again, "the released permits are free again");
    assert.ok(again.fencingToken() > one.fencingToken());
    await again.unlock();
    await one.unlock();
    assert.equal(await a.inspect(k), undefined, "free once every grant is released");
  });

  it("never holds more than the limit among racing clients", async () => {
    const k = key("sem-race");
    const limit = 3;
    const clients = Array.from({ length: 8 }, (_, i) => createClient(addr!, { ...quiet, holder: `ts-racer-${i}` }));
    let inside = 0;
    let most = 0;
    let entered = 0;
    const tokens: bigint[] = [];
    try {
      await Promise.all(
        clients.map(async (c) => {
          for (let round = 0; round < 3; round++) {
            await c.semaphore(k, limit).ttl("10s").wait("30s").run(async (g) => {
              tokens.push(g.fencingToken());
              inside++;
              most = Math.max(most, inside);
              // The first grants hold on until the limit was reached (most,
              // not inside: the last of them leaves at once): the semaphore
              // must let that many in at once. Later ones hold across a
              // round trip, so that they overlap as they come.
              if (++entered <= limit) await eventually(`${limit} holders at once`, () => most >= limit, 10_000);
              else await a.inspect(k);
              inside--;
            });
          }
        }),
      );
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
    assert.equal(most, limit, `${most} holders at once on a semaphore of ${limit}`);
    assert.equal(tokens.length, 24);
    assert.equal(new Set(tokens).size, tokens.length, "every grant has its own fencing token");
  });

  it("a waiting grant is served when permits are released, and the watchdog renews it", async () => {
    const k = key("sem-wait");
    const held = await a.semaphore(k, 2).permits(2).ttl("10s").acquire();
    const waiting = b.semaphore(k, 2).ttl(300).wait("10s").acquire();
    await eventually("the grant to queue", async () => ((await a.inspect(k))?.waiters ?? 0) > 0);
    await held.unlock();
    const g = await waiting;
    // Three TTLs' worth of renewals: an unrenewed grant would have expired.
    await eventually("three renewals", () => g.renewals >= 3, 5_000);
    assert.equal(g.held, true);
    assert.equal((await a.inspect(k))?.fencingToken, g.fencingToken(), "the grant is still the server's");
    await g.unlock();
  });

  it("a grant released behind its guard's back is poisoned (rejected) at its next renewal", async () => {
    const k = key("sem-lost");
    let owner = "";
    const spy: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (!res.stream && req.method.name === "Acquire") owner = (res.message as unknown as { lease?: { ownerToken: string } }).lease?.ownerToken ?? owner;
      return res;
    };
    const c = createClient(addr!, { ...quiet, interceptors: [spy] });
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    try {
      const other = await a.semaphore(k, 2).ttl("10s").acquire();
      const g = await c.semaphore(k, 2).ttl(300).acquire();
      assert.equal((await raw.release({ key: k, ownerToken: owner })).released, true);
      await eventually("the guard to be poisoned", () => g.signal.aborted, 2_000);
      const reason: unknown = g.signal.reason;
      assert.ok(reason instanceof LeaseLostError && reason.reason === "rejected", String(reason));
      assert.throws(() => g.fencingToken(), LeaseLostError);
      assert.equal(other.held, true, "the other grant of the key is untouched");
      assert.equal((await a.inspect(k))?.fencingToken, other.fencingToken());
      await other.unlock();
    } finally {
      await c.close();
    }
  });

  it("a limit or kind other than the key's is failed_precondition, at once and not retried", async () => {
    const k = key("sem-mismatch");
    const count = counting();
    const c = createClient(addr!, { ...quiet, interceptors: [count.interceptor] });
    const g = await a.semaphore(k, 3).ttl("10s").acquire();
    try {
      for (const [what, call] of [
        ["another limit", () => c.semaphore(k, 4).wait("5s").acquire()],
        ["a lock", () => c.lock(k).wait("5s").acquire()],
        ["an rwlock", () => c.rwlock(k).write().tryAcquire()],
      ] as const) {
        count.sent.length = 0;
        await assert.rejects(call(), (e: unknown) => e instanceof ServerError && e.code === "failed_precondition", what);
        assert.deepEqual(count.sent, ["Acquire"], `${what}: one Acquire, not retried`);
      }
    } finally {
      await g.unlock();
      await c.close();
    }
  });

  it("a mutex granted for a semaphore (a server that drops the kind) is given back and refused as unimplemented", async () => {
    const k = key("sem-old-server");
    // The server's answer as a server from before kinds would give it: the lease without its kind.
    const dropKind: Interceptor = (next) => async (req) => {
      const res = await next(req);
      const lease = (res.message as unknown as { lease?: { kind: PbKind } }).lease;
      if (!res.stream && req.method.name === "Acquire" && lease) lease.kind = PbKind.UNSPECIFIED;
      return res;
    };
    const c = createClient(addr!, { ...quiet, interceptors: [dropKind] });
    try {
      await assert.rejects(
        c.semaphore(k, 2).ttl("10s").acquire(),
        (e: unknown) => e instanceof ServerError && e.code === "unimplemented" && /asked for a semaphore, the server granted a mutex/.test(e.message),
      );
      assert.equal(await a.inspect(k), undefined, "the grant was released");
    } finally {
      await c.close();
    }
  });

  it("list and watch show a semaphore's grants: list every holder of the key, watch one event per grant", async () => {
    const k = key("sem-state");
    const ac = new AbortController();
    const events = a.watch({ key: k }, { signal: ac.signal });
    const next = async (): Promise<LockEvent> => {
      const r = await events.next();
      assert.ok(!r.done, "the watch ended");
      return r.value;
    };
    try {
      assert.equal((await next()).type, "synced");
      const g1 = await a.semaphore(k, 4).permits(3).ttl("10s").acquire();
      const g2 = await b.semaphore(k, 4).ttl("10s").acquire();
      const [t1, t2] = [g1.fencingToken(), g2.fencingToken()];
      for (const g of [g1, g2]) {
        const ev = await next();
        assert.equal(ev.type, "acquired");
        assert.equal(ev.state?.kind, "semaphore");
        assert.equal(ev.state.limit, 4);
        assert.deepEqual(ev.state.holders.map((h) => [h.fencingToken, h.permits]), [[g.fencingToken(), g.permits]], "the event's one grant");
      }
      const listed: LockState[] = [];
      for await (const st of a.list(k)) listed.push(st);
      assert.equal(listed.length, 1, "one key");
      assert.deepEqual(listed[0]?.holders.map((h) => [h.fencingToken, h.holder, h.permits]), [
        [t1, "ts-sem-a", 3],
        [t2, "ts-sem-b", 1],
      ]);
      assert.equal(listed[0]?.permitsInUse, 4);
      await g1.unlock();
      const released = await next();
      assert.equal(released.type, "released");
      assert.equal(released.state?.holders[0]?.fencingToken, t1, "the released grant");
      await g2.unlock();
    } finally {
      ac.abort();
    }
  });

  it("the client's one watchdog renews grants with its locks, in ExtendBatch calls, each grant by its own token", async () => {
    const items: string[][] = []; // the keys of each ExtendBatch
    let extends_ = 0;
    const record: Interceptor = (next) => (req) => {
      if (req.method.name === "ExtendBatch") items.push((req.message as unknown as { items: { key: string }[] }).items.map((it) => it.key));
      if (req.method.name === "Extend") extends_++;
      return next(req);
    };
    const c = createClient(addr!, { ...quiet, interceptors: [record] });
    const [sem, rw, plain] = [key("renew-sem"), key("renew-rw"), key("renew-lock")];
    const ttl = 900;
    try {
      const gs = [
        await c.semaphore(sem, 3).permits(2).ttl(ttl).acquire(),
        await c.semaphore(sem, 3).ttl(ttl).acquire(),
        await c.rwlock(rw).read().ttl(ttl).acquire(),
        await c.lock(plain).ttl(ttl).acquire(),
      ];
      await eventually("two renewals of every guard", () => gs.every((g) => g.renewals >= 2), 3 * ttl);
      for (const g of gs) assert.ok(g.held, `${g.kind} ${g.key}: ${String(g.lostError)}`);
      assert.equal(extends_, 0, "plain Extends to a server that batches");
      assert.ok(items.some((keys) => keys.filter((k) => k === sem).length === 2), `no batch renewed both grants of the semaphore: ${JSON.stringify(items)}`);
      const st = await a.inspect(sem);
      assert.deepEqual(st?.holders.map((h) => h.fencingToken), [gs[0].fencingToken(), gs[1].fencingToken()], "both grants still the server's");
      for (const g of gs) await g.unlock();
    } finally {
      await c.close();
    }
  });

  it("serverInfo says which kinds the backend keeps", async () => {
    const info = await a.serverInfo();
    assert.deepEqual([...info.backend.kinds].sort(), ["election", "mutex", "rwlock", "semaphore"]);
    assert.ok(info.backend.maxLimit >= 1);
    assert.ok(info.backend.rwlockReaders >= 1);
  });
});

describe("read-write locks", { skip: needsServer }, () => {
  let a: Client;
  let b: Client;
  before(() => {
    a = createClient(addr!, { ...quiet, holder: "ts-rw-a" });
    b = createClient(addr!, { ...quiet, holder: "ts-rw-b" });
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  it("readers share the key, a writer waits for them and then holds it alone", async () => {
    const k = key("rw");
    const r1 = await a.rwlock(k).read().ttl("10s").acquire();
    const r2 = await b.rwlock(k).read().ttl("10s").acquire();
    for (const r of [r1, r2]) assert.deepEqual([r.kind, r.permits, r.mode], ["rwlock", 1, "shared"]);
    assert.ok(r2.fencingToken() > r1.fencingToken());
    assert.equal(await b.rwlock(k).write().tryAcquire(), undefined, "a writer does not join readers");
    await assert.rejects(b.rwlock(k).write().wait(0).acquire(), (e: unknown) => e instanceof NotAcquiredError && /not acquired: read by 2 holders$/.test(e.message));

    const writing = b.rwlock(k).write().ttl("10s").wait("10s").acquire();
    await eventually("the writer to queue", async () => ((await a.inspect(k))?.waiters ?? 0) > 0);
    const lastReader = r2.fencingToken();
    await r1.unlock();
    await r2.unlock();
    const w = await writing;
    assert.deepEqual([w.kind, w.permits, w.mode, w.limit], ["rwlock", r1.limit, "exclusive", r1.limit], "a writer holds the whole limit");
    assert.equal(w.limit, (await a.serverInfo()).backend.rwlockReaders);
    assert.ok(w.fencingToken() > lastReader);
    assert.equal(await a.rwlock(k).read().tryAcquire(), undefined, "a reader does not join a writer");
    await assert.rejects(a.rwlock(k).read().wait(0).acquire(), (e: unknown) => e instanceof NotAcquiredError && /not acquired: written by "ts-rw-b" \(fencing token \d+\)$/.test(e.message));
    assert.equal(await a.rwlock(k).write().tryAcquire(), undefined, "nor does another writer");
    const st = await a.inspect(k);
    assert.equal(st?.kind, "rwlock");
    assert.deepEqual(st?.holders.map((h) => h.mode), ["exclusive"]);
    await w.unlock();
  });

  it("a reader arriving behind a waiting writer waits for it (arrival order)", async () => {
    const k = key("rw-fifo");
    const r1 = await a.rwlock(k).read().ttl("10s").acquire();
    const order: string[] = [];
    const writing = b.rwlock(k).write().ttl("10s").wait("10s").acquire().then((g: Guard) => {
      order.push("writer");
      return g;
    });
    await eventually("the writer to queue", async () => ((await a.inspect(k))?.waiters ?? 0) === 1);
    const reading = a.rwlock(k).read().ttl("10s").wait("10s").acquire().then((g: Guard) => {
      order.push("reader");
      return g;
    });
    await eventually("the reader to queue behind it", async () => ((await a.inspect(k))?.waiters ?? 0) === 2);
    await r1.unlock();
    const w = await writing;
    assert.deepEqual(order, ["writer"], "the reader did not overtake the waiting writer");
    await w.unlock();
    const r2 = await reading;
    assert.deepEqual(order, ["writer", "reader"]);
    await r2.unlock();
  });

  it("a lock's key is not an rwlock: failed_precondition", async () => {
    const k = key("rw-mismatch");
    const g = await a.lock(k).ttl("10s").acquire();
    try {
      await assert.rejects(b.rwlock(k).read().wait(0).acquire(), (e: unknown) => e instanceof ServerError && e.code === "failed_precondition");
    } finally {
      await g.unlock();
    }
  });
});
