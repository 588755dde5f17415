// What the SDK's tests share: the server they run against, unique keys,
// poll-until helpers (no fixed sleeps standing in for events), and clients
// whose transport misbehaves on purpose.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createClient, type Client, type Logger, type NodeClientOptions } from "../src/node.js";

/** The server of scripts/with-server.sh (make test-sdk-ts). */
export const addr = process.env.HOLDFAST_ADDR;
export const serverPid = process.env.HOLDFAST_SERVER_PID ? Number(process.env.HOLDFAST_SERVER_PID) : undefined;
const required = process.env.HOLDFAST_REQUIRE_SERVICES === "1";

/** The holdfast binary tests start servers of their own from (startServer's `bin`). */
export const holdfastBin = process.env.HOLDFAST_BIN ?? (process.env.HOLDFAST_BIN_DIR ? join(process.env.HOLDFAST_BIN_DIR, "holdfast") : undefined);

if (required && (!addr || !holdfastBin)) {
  throw new Error("HOLDFAST_ADDR or HOLDFAST_BIN_DIR is unset: run the tests through make test-sdk-ts (scripts/with-server.sh)");
}

/** The skip option of a suite that needs the shared server. */
export const needsServer = addr ? false : "HOLDFAST_ADDR is unset: run through scripts/with-server.sh (make test-sdk-ts)";
/** The skip option of a suite that starts servers of its own. */
export const needsBinary = holdfastBin ? false : "HOLDFAST_BIN_DIR is unset: run through make test-sdk-ts";

/** A key no other test uses. */
export function key(name: string): string {
  return `ts/${name}/${randomBytes(6).toString("hex")}`;
}

/** Polls cond until it holds or the deadline passes. */
export async function eventually(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (performance.now() > deadline) assert.fail(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Resolves when signal aborts (with its reason), or rejects after timeoutMs. */
export function aborted(signal: AbortSignal, timeoutMs: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) { resolve(signal.reason); return; }
    const t = setTimeout(() => { reject(new Error(`signal not aborted within ${timeoutMs}ms`)); }, timeoutMs);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(signal.reason);
    });
  });
}

/** A loopback port nobody listens on: bound, noted, closed. */
export async function closedPort(): Promise<number> {
  return new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => { resolve(p); });
    });
  });
}

/**
 * A client whose transport records the owner tokens the server hands out, so
 * a test can act as a rogue party that releases a guard's lease behind its
 * back (the real server, a real token).
 */
export function spyingClient(tokens: Map<string, string>, options: NodeClientOptions = {}): Client {
  const spy: Interceptor = (next) => async (req) => {
    const res = await next(req);
    if (!res.stream && req.method.name === "Acquire") {
      const m = res.message as unknown as { acquired: boolean; lease?: { key: string; ownerToken: string } };
      if (m.acquired && m.lease) tokens.set(m.lease.key, m.lease.ownerToken);
    }
    return res;
  };
  return createClient(addr!, { logger: recordingLogger(), ...options, interceptors: [spy] });
}

/**
 * A client whose transport loses the answer to its first Release: "after"
 * forwards it (the server releases) and then reports unavailable, as a
 * connection cut after the request left; "before" fails it without sending.
 * stripRequestIds sends every Release without its request id, as to a
 * server whose backend keeps none.
 */
export function lossyReleaseClient(when: "before" | "after", options: { stripRequestIds?: boolean } = {}): Client {
  let dropped = false;
  const lossy: Interceptor = (next) => async (req) => {
    if (req.method.name === "Release" && options.stripRequestIds) (req.message as unknown as { requestId: string }).requestId = "";
    if (req.method.name !== "Release" || dropped) return next(req);
    dropped = true;
    if (when === "after") await next(req);
    throw new ConnectError("connection reset (test)", Code.Unavailable);
  };
  return createClient(addr!, { logger: recordingLogger(), interceptors: [lossy] });
}

/** PEM files of a throw-away CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl. */
export interface Certs {
  dir: string;
  caCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  remove(): void;
}

export function makeCerts(): Certs {
  const dir = mkdtempSync(join(tmpdir(), "holdfast-ts-certs-"));
  const f = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=holdfast test CA",
    "-keyout", f("ca.key"), "-out", f("ca.pem"));
  for (const [name, ext] of [
    ["server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"],
    ["client", "extendedKeyUsage=clientAuth"],
  ] as const) {
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", `/CN=holdfast test ${name}`,
      "-keyout", f(`${name}.key`), "-out", f(`${name}.csr`));
    const extFile = f(`${name}.ext`);
    writeFileSync(extFile, ext + "\n");
    openssl("x509", "-req", "-in", f(`${name}.csr`), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "1",
      "-extfile", extFile, "-out", f(`${name}.pem`));
  }
  return {
    dir,
    caCert: f("ca.pem"),
    serverCert: f("server.pem"),
    serverKey: f("server.key"),
    clientCert: f("client.pem"),
    clientKey: f("client.key"),
    remove: () => { rmSync(dir, { recursive: true, force: true }); },
  };
}

export const read = (path: string): string => readFileSync(path, "utf8");

/** A logger that keeps what it is told, for tests that check logs (and keep the others quiet). */
export function recordingLogger(): Logger & { lines: { level: string; message: string; fields?: Record<string, unknown> }[] } {
  const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
  const at = (level: string) => (message: string, fields?: Record<string, unknown>) => void lines.push({ level, message, fields });
  return { lines, debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

