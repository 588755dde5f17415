// @holdfast/sdk/testing: the helper users start a real server with in their own tests.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { describe, it } from "node:test";
import { UnavailableError, createClient } from "../src/node.js";
import { awaitStopped, startServer } from "../src/testing.js";
import { holdfastBin, key, needsBinary, recordingLogger } from "./helpers.js";

/** Runs fn with environment variables set (undefined: unset), restoring them after. */
async function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (v: Record<string, string | undefined>) => {
    for (const [k, val] of Object.entries(v)) {
      if (val === undefined) Reflect.deleteProperty(process.env, k);
      else process.env[k] = val;
    }
  };
  apply(vars);
  try {
    return await fn();
  } finally {
    apply(saved);
  }
}

const processGone = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
};

describe("startServer", { skip: needsBinary }, () => {
  it("runs holdfast on a free loopback port; stop() ends it and may be called again", async () => {
    const server = await startServer({ bin: holdfastBin });
    assert.match(server.address, /^http:\/\/127\.0\.0\.1:\d+$/);
    const c = createClient(server.address, { logger: recordingLogger() });
    const g = await c.lock(key("testing")).ttl("5s").acquire();
    await g.unlock();
    await c.close();
    await server.stop();
    assert.ok(processGone(server.pid), "the server process is gone after stop()");
    await server.stop();
  });

  it("pause() makes the server stop answering until resume()", async () => {
    await using server = await startServer({ bin: holdfastBin });
    const c = createClient(server.address, { retryBudget: "300ms", logger: recordingLogger() });
    server.pause();
    try {
      await assert.rejects(c.inspect("k"), UnavailableError);
    } finally {
      server.resume();
    }
    assert.equal(await c.inspect("k"), undefined);
    await c.close();
  });

  it("finds the binary through HOLDFAST_BIN, then PATH", async () => {
    await withEnv({ HOLDFAST_BIN: holdfastBin }, async () => {
      await using server = await startServer();
      assert.ok(server.pid > 0);
    });
    await withEnv({ HOLDFAST_BIN: undefined, PATH: `${dirname(holdfastBin!)}:${process.env.PATH}` }, async () => {
      await using server = await startServer();
      assert.ok(server.pid > 0);
    });
  });

  it("says how to point it at a binary when there is none", async () => {
    await withEnv({ HOLDFAST_BIN: undefined, PATH: "/nonexistent" }, async () => {
      await assert.rejects(startServer(), /HOLDFAST_BIN/);
    });
  });

  it("a server that fails to start is reported with its logs", async () => {
    await assert.rejects(startServer({ bin: holdfastBin, args: ["--backend", "nosuchbackend"] }), (e: unknown) => {
      assert.ok(e instanceof Error);
      assert.match(e.message, /exited before it was serving/);
      assert.match(e.message, /no holdfast-backend-nosuchbackend/);
      return true;
    });
  });
});

describe("awaitStopped", { skip: existsSync("/proc/self/task") ? false : "no /proc: awaitStopped returns at once" }, () => {
  /** A child Node process that runs until killed, once it has started (with its several threads), and its exit. */
  async function child() {
    const c = spawn(process.execPath, ["-e", "process.stdout.write('ready\\n'); setInterval(() => undefined, 1000)"], { stdio: ["ignore", "pipe", "ignore"] });
    await new Promise<void>((resolve, reject) => c.once("error", reject).stdout.once("data", () => {
      resolve();
    }));
    const exited = new Promise<void>((resolve) => {
      c.once("exit", () => {
        resolve();
      });
    });
    return { pid: c.pid!, kill: async () => { c.kill("SIGKILL"); await exited; } };
  }

  it("returns once every thread of a process sent SIGSTOP is stopped", async () => {
    const c = await child();
    try {
      process.kill(c.pid, "SIGSTOP");
      awaitStopped(c.pid);
      // Stopped stays stopped until SIGCONT: what /proc says now is what awaitStopped saw.
      const states = readdirSync(`/proc/${c.pid}/task`).map((tid) => readFileSync(`/proc/${c.pid}/task/${tid}/stat`, "utf8").split(") ").at(-1)![0]);
      assert.ok(states.length > 1 && states.every((st) => st === "T"), `thread states ${states.join("")}`);
    } finally {
      await c.kill();
    }
  });

  it("throws after its timeout when the process does not stop, or is gone", async () => {
    const c = await child();
    try {
      const t0 = performance.now();
      assert.throws(() => {
        awaitStopped(c.pid, 50);
      }, /did not stop within 50ms/);
      assert.ok(performance.now() - t0 >= 50, "gave up before its timeout");
    } finally {
      await c.kill();
    }
    assert.throws(() => {
      awaitStopped(c.pid, 50);
    }, /did not stop within 50ms/);
  });
});
