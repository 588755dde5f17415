/**
 * "@holdfast/sdk/testing": a real holdfast server for your own tests
 * (node:test, vitest, jest). startServer() runs the `holdfast` binary on a
 * free loopback port with the embedded memory backend and stops it when
 * you are done:
 *
 *   const server = await startServer();
 *   const client = createClient(server.address);
 *   ...
 *   await server.stop();
 *
 * The binary is the `bin` option, else $HOLDFAST_BIN, else `holdfast` on
 * PATH. Node only.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, existsSync, readdirSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { createInterface } from "node:readline";
import { checkPositive, type Duration } from "./duration.js";

export interface StartServerOptions {
  /** Path of the holdfast binary (default: $HOLDFAST_BIN, else `holdfast` on PATH). */
  bin?: string;
  /** Extra `holdfast serve` flags, e.g. `["--auth-tokens", file]` or `["--backend", "redis", "--backend-opt", "addrs=…"]`. */
  args?: readonly string[];
  /** How long to wait for the server to say it is serving (default 30 s). */
  readyTimeout?: Duration;
  /** Where the server's logs (stderr) go: kept and shown if it fails to start (default), or passed to this process's stderr. */
  logs?: "on-failure" | "inherit";
}

/** A running holdfast server. */
export interface TestServer {
  /** Its base URL, "http://127.0.0.1:PORT" (https:// when started with --tls-cert): pass it to createClient. */
  readonly address: string;
  /** Its process id. */
  readonly pid: number;
  /**
   * Freezes the server (SIGSTOP): calls hang and leases stop being renewed, as with a stalled or partitioned server.
   * Returns once every thread of it has stopped (awaitStopped); throws if that takes over a second.
   */
  pause(): void;
  /** Lets a paused server run again (SIGCONT). */
  resume(): void;
  /** Stops the server (SIGTERM, then SIGKILL after 10 s) and resolves once it has exited. Idempotent. */
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const readyLine = /^holdfast serving addr=(\S+)/;
const running = new Set<ChildProcess>();
let exitHook = false;

/** Servers still running when this process exits are killed, so a test that forgot stop() leaves none behind. */
function killOnExit(child: ChildProcess): void {
  running.add(child);
  child.once("exit", () => running.delete(child));
  if (exitHook) return;
  exitHook = true;
  process.once("exit", () => {
    for (const c of running) c.kill("SIGKILL");
  });
}

/** The binary to run: the option, $HOLDFAST_BIN, or `holdfast` on PATH. */
function findHoldfast(bin?: string): string {
  const chosen = bin ?? process.env.HOLDFAST_BIN;
  if (chosen) return chosen;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, "holdfast");
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  throw new Error("holdfast/testing: no holdfast binary: pass { bin }, set HOLDFAST_BIN, or put holdfast on PATH");
}

/** Starts `holdfast serve --addr 127.0.0.1:0` and resolves once it is serving. */
export async function startServer(options: StartServerOptions = {}): Promise<TestServer> {
  const bin = findHoldfast(options.bin);
  const readyTimeoutMs = checkPositive("readyTimeout", options.readyTimeout ?? 30_000);
  const inherit = options.logs === "inherit";
  const child = spawn(bin, ["serve", "--addr", "127.0.0.1:0", ...(options.args ?? [])], {
    stdio: ["ignore", "pipe", inherit ? "inherit" : "pipe"],
  });
  const { pid, stdout } = child;
  if (pid === undefined || !stdout) throw new Error(`holdfast/testing: ${bin} did not start`);
  killOnExit(child);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      resolve();
    });
  });
  // The last few KiB of the server's logs, for the error when it fails to start.
  let logTail = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    logTail = (logTail + chunk.toString()).slice(-8_192);
  });

  let address: string;
  try {
    address = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`no readiness line within ${readyTimeoutMs}ms`));
      }, readyTimeoutMs);
      const lines = createInterface({ input: stdout });
      lines.on("line", (line) => {
        const m = readyLine.exec(line);
        if (!m) return;
        clearTimeout(timer);
        lines.removeAllListeners("line");
        // Keep reading, so that the server never blocks on a full pipe.
        lines.on("line", () => undefined);
        resolve(m[1]);
      });
      child.once("error", (e) => {
        clearTimeout(timer);
        reject(e);
      });
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`exited before it was serving (${signal ?? `status ${code}`})`));
      });
    });
  } catch (e) {
    child.kill("SIGKILL");
    await exited;
    throw new Error(`holdfast/testing: ${bin} serve: ${e instanceof Error ? e.message : String(e)}${logTail ? `\n${logTail}` : ""}`, { cause: e });
  }
  // From here on the server must not keep the test process alive by itself.
  child.unref();
  for (const s of [child.stdout, child.stderr]) (s as unknown as { unref?: () => void } | null)?.unref?.();

  const tls = (options.args ?? []).includes("--tls-cert") || (options.args ?? []).some((a) => a.startsWith("--tls-cert="));
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.ref(); // keep this process alive until the server is gone
      child.kill("SIGTERM");
      child.kill("SIGCONT"); // a paused server must see the TERM
      const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(killer);
    })();
    return stopping;
  };
  return {
    address: `${tls ? "https" : "http"}://${address}`,
    pid,
    pause: () => {
      child.kill("SIGSTOP");
      awaitStopped(pid);
    },
    resume: () => {
      child.kill("SIGCONT");
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/**
 * Returns once every thread of process pid is stopped (Linux: state T, or t
 * under a tracer, in /proc/PID/task/TID/stat), looking every millisecond;
 * throws an Error after timeoutMs (default 1 s), also when pid has exited.
 * kill(SIGSTOP) returns before the threads have stopped: a call sent right
 * after it could still be answered by a thread that was running. Without
 * /proc (not Linux) it returns at once. The Python SDK's
 * holdfast.testing.await_stopped is the same.
 */
export function awaitStopped(pid: number, timeoutMs = 1_000): void {
  if (!existsSync("/proc/self/task")) return;
  const deadline = performance.now() + timeoutMs;
  while (!allThreadsStopped(pid)) {
    if (performance.now() > deadline) throw new Error(`holdfast/testing: process ${pid} did not stop within ${timeoutMs}ms of SIGSTOP`);
    // A synchronous 1 ms pause, not a spin: on a busy machine the threads
    // to be stopped need the CPU to take the signal.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
  }
}

/** Whether every thread of pid is stopped; false when pid is gone or a thread ended while being read (look again). */
function allThreadsStopped(pid: number): boolean {
  try {
    return readdirSync(`/proc/${pid}/task`).every((tid) => {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      // The state follows the command name, which is in parentheses.
      const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
      return state === "T" || state === "t";
    });
  } catch {
    return false;
  }
}
