// client.runScheduled: a scheduled job on one process at a time
// (docs/recipes/scheduled-jobs.md), against the shared server.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { LockService } from "../src/gen/holdfast/lock/v1/lock_pb.js";
import { DeadlineExceededError, InvalidArgumentError, LeaseLostError, createClient, type Client } from "../src/node.js";
import { addr, closedPort, key, needsServer, recordingLogger, spyingClient } from "./helpers.js";

/** Resolves with signal's reason once it aborts. */
const abortedWith = (signal: AbortSignal): Promise<unknown> =>
  new Promise((resolve) => {
    signal.addEventListener("abort", () => {
      resolve(signal.reason);
    });
  });

describe("runScheduled", { skip: needsServer }, () => {
  let a: Client;
  let b: Client;
  before(() => {
    a = createClient(addr!, { holder: "scheduler-a", logger: recordingLogger() });
    b = createClient(addr!, { holder: "scheduler-b", logger: recordingLogger() });
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  it("runs the job under a lease longer than its deadline, with the fencing token, and releases after", async () => {
    const k = key("scheduled");
    const r = await a.runScheduled({
      key: k,
      maxRuntime: "2s",
      run: async (signal, fencingToken) => {
        const st = await b.inspect(k);
        assert.equal(st?.fencingToken, fencingToken);
        assert.equal(st.holder, "scheduler-a");
        // The default TTL is 1.5 × maxRuntime.
        assert.ok(st.expiresAt && st.expiresAt.getTime() - Date.now() > 2_000, "the lease outlasts the deadline");
        assert.equal(signal.aborted, false);
        return "report";
      },
    });
    assert.deepEqual(r, { ran: true, value: "report" });
    assert.equal(await b.inspect(k), undefined, "released after the run");
  });

  it("skips the job, without calling it, while another process runs it", async () => {
    const k = key("scheduled-held");
    const outer = await a.runScheduled({
      key: k,
      maxRuntime: "5s",
      run: async () => {
        let called = false;
        const inner = await b.runScheduled({
          key: k,
          maxRuntime: "5s",
          run: () => {
            called = true;
          },
        });
        assert.deepEqual(inner, { ran: false });
        assert.equal(called, false);
        return "first";
      },
    });
    assert.deepEqual(outer, { ran: true, value: "first" });
  });

  it("aborts the run's signal at maxRuntime with a deadline_exceeded error", async () => {
    const t0 = performance.now();
    await assert.rejects(
      a.runScheduled({
        key: key("scheduled-overrun"),
        maxRuntime: 300,
        ttl: "5s",
        run: async (signal) => {
          throw await abortedWith(signal);
        },
      }),
      (e: unknown) => e instanceof DeadlineExceededError && e.code === "deadline_exceeded",
    );
    const took = performance.now() - t0;
    assert.ok(took >= 300 && took < 2_300, `aborted after ${took}ms for a 300ms maxRuntime`);
  });

  it("a lease lost during the run aborts its signal and rejects with the LeaseLostError", async () => {
    const tokens = new Map<string, string>();
    const spying = spyingClient(tokens);
    const raw = createConnectClient(LockService, createConnectTransport({ baseUrl: addr!, httpVersion: "1.1" }));
    const k = key("scheduled-lost");
    await assert.rejects(
      spying.runScheduled({
        key: k,
        // Renewed (and refused) every 500 ms, well before the 1.4 s deadline.
        maxRuntime: 1_400,
        ttl: 1_500,
        run: async (signal) => {
          assert.equal((await raw.release({ key: k, ownerToken: tokens.get(k)! })).released, true);
          const reason = await abortedWith(signal); // the watchdog's next renewal is refused
          assert.ok(reason instanceof LeaseLostError && reason.reason === "rejected");
          return "finished anyway";
        },
      }),
      (e: unknown) => e instanceof LeaseLostError && e.reason === "rejected",
    );
    await spying.close();
  });

  it("refuses a TTL that is not longer than maxRuntime, before sending", async () => {
    const c = createClient(`http://127.0.0.1:${await closedPort()}`, { logger: recordingLogger() });
    await assert.rejects(
      c.runScheduled({ key: "k", maxRuntime: "1m", ttl: "1m", run: () => undefined }),
      (e: unknown) => e instanceof InvalidArgumentError && /ttl: 1m must be longer than maxRuntime 1m/.test(e.message),
    );
    await assert.rejects(c.runScheduled({ key: "k", maxRuntime: 0, run: () => undefined }), InvalidArgumentError);
    await c.close();
  });
});
