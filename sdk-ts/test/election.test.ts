// Leader election: a campaign is a lock's acquisition of an election key,
// the leadership a Guard whose fencing token is the term. Validation needs
// no server (nothing is sent); the rest runs against a real `holdfast
// serve` on the memory backend (scripts/with-server.sh).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createClient as createConnectClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { LockService } from "../src/gen/holdfast/lock/v1/lock_pb.js";
import { InvalidArgumentError, LeaseLostError, LockReleasedError, NotAcquiredError, createClient, type Client, type Leadership, type Observation } from "../src/node.js";
import { addr, closedPort, key, needsServer, recordingLogger } from "./helpers.js";

const quiet = { logger: recordingLogger() };

describe("election validation, before anything is sent", () => {
  let c: Client;
  const sent: string[] = [];
  const count: Interceptor = (next) => (req) => {
    sent.push(req.method.name);
    return next(req);
  };
  before(async () => {
    c = createClient(`http://127.0.0.1:${await closedPort()}`, { ...quiet, interceptors: [count] });
  });
  after(async () => {
    await c.close();
  });

  const refused: [string, string, RegExp][] = [
    ["4097 bytes", "v".repeat(4097), /^holdfast: value: 4097 bytes exceeds the maximum 4096 bytes$/],
    // 2049 characters, 4098 bytes: the limit counts bytes.
    ["2049 two-byte characters", "é".repeat(2049), /^holdfast: value: 4098 bytes exceeds the maximum 4096 bytes$/],
    ["a lone surrogate", "a\uD800b", /^holdfast: value: must be valid UTF-8$/],
    ["a NUL", "a\u0000b", /^holdfast: value: must not contain NUL \(found at byte 1\)$/],
  ];
  for (const [what, value, message] of refused) {
    it(`refuses a value of ${what} with invalid_argument`, async () => {
      for (const e of [c.election("e"), c.election("e").wait(0)]) {
        await assert.rejects(e.campaign(value), (err: unknown) => err instanceof InvalidArgumentError && err.code === "invalid_argument" && message.test(err.message));
      }
      assert.deepEqual(sent, [], "nothing was sent");
    });
  }
});

/** The messages of an observe, read one at a time. */
function observer(c: Client, k: string): { next(): Promise<Observation>; stop(): Promise<void> } {
  const stop = new AbortController();
  const it = c.election(k).observe({ signal: stop.signal })[Symbol.asyncIterator]();
  return {
    async next() {
      const r = await it.next();
      assert.equal(r.done, false, "the observation ended");
      return r.value;
    },
    async stop() {
      stop.abort();
      const r = await it.next();
      assert.equal(r.done, true, "observe ends quietly when its signal aborts");
    },
  };
}

describe("election", { skip: needsServer }, () => {
  let a: Client;
  let b: Client;
  before(() => {
    a = createClient(addr ?? "", quiet);
    b = createClient(addr ?? "", quiet);
  });
  after(async () => {
    await a.close();
    await b.close();
  });

  it("elects one leader, shows its value and proclaims to Leader and Observe, and hands over to the next campaigner with a larger term", async () => {
    const k = key("election");
    const obs = observer(b, k);
    assert.equal((await obs.next()).leader, undefined, "the first message of a free election");

    const lead = await a.election(k).ttl("1m").holder("node-a").campaign("10.0.0.1:80");
    const term1 = lead.term();
    assert.equal(lead.guard.kind, "election");
    assert.equal(lead.value, "10.0.0.1:80");
    assert.equal(lead.key, k);
    let o = await obs.next();
    assert.deepEqual([o.leader?.term, o.leader?.value, o.leader?.holder], [term1, "10.0.0.1:80", "node-a"]);
    const ld = await b.election(k).leader();
    assert.deepEqual([ld?.term, ld?.value, ld?.holder], [term1, "10.0.0.1:80", "node-a"]);
    await assert.rejects(b.election(k).wait(0).campaign("b"), (e: unknown) => e instanceof NotAcquiredError && /led by "node-a"/.test(e.message));

    await lead.proclaim("10.0.0.1:81");
    assert.equal(lead.value, "10.0.0.1:81");
    o = await obs.next();
    assert.deepEqual([o.leader?.term, o.leader?.value], [term1, "10.0.0.1:81"], "a proclaim keeps the term");
    assert.equal((await b.election(k).leader())?.value, "10.0.0.1:81");

    const next = b.election(k).ttl("1m").campaign("b");
    // Queued on the server before the resignation frees the key.
    for (;;) {
      const st = await a.inspect(k);
      if ((st?.waiters ?? 0) >= 1) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    await lead.resign();
    await assert.rejects(lead.proclaim("late"), LockReleasedError);
    const second = await next;
    assert.ok(second.term() > term1, "the next leader's term is larger");
    o = await obs.next();
    if (o.leader === undefined) o = await obs.next();
    assert.deepEqual([o.leader?.term, o.leader?.value], [second.term(), "b"]);
    await second.resign();
    assert.equal((await obs.next()).leader, undefined, "no leader after the last resignation");
    await obs.stop();
    assert.equal(await b.election(k).leader(), undefined);
  });

  it("poisons a deposed leader's leadership when its proclaim is answered proclaimed=false", async () => {
    const k = key("election-deposed");
    const tokens: string[] = [];
    // The owner token never leaves the SDK: record it on the wire to end the
    // leadership behind the leader's back, as an expiry would.
    const spy: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (!res.stream && req.method.name === "Acquire") {
        const lease = (res.message as { lease?: { ownerToken: string } }).lease;
        if (lease) tokens.push(lease.ownerToken);
      }
      return res;
    };
    const c = createClient(addr ?? "", { ...quiet, interceptors: [spy] });
    try {
      const lead: Leadership = await c.election(k).ttl("1m").campaign("v");
      const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr ?? "", httpVersion: "1.1" }));
      assert.equal((await raw.release({ key: k, ownerToken: tokens[0] })).released, true);
      await assert.rejects(lead.proclaim("w"), (e: unknown) => e instanceof LeaseLostError && e.reason === "rejected");
      assert.throws(() => lead.term(), LeaseLostError);
      assert.equal(lead.held, false);
      assert.ok(lead.signal.aborted && lead.signal.reason instanceof LeaseLostError);
      assert.equal(lead.value, "v", "a refused proclaim keeps the old value");
      await assert.rejects(lead.resign(), LeaseLostError);
    } finally {
      await c.close();
    }
  });

  it("resigns at the end of an await using block", async () => {
    const k = key("election-dispose");
    {
      await using lead = await a.election(k).ttl("1m").campaign("v");
      assert.equal((await b.election(k).leader())?.term, lead.term());
    }
    assert.equal(await b.election(k).leader(), undefined);
  });
});
