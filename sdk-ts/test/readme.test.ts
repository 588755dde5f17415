// The README's snippets (each fenced block after a `<!-- snippet: NAME -->`
// line) run as they are written, as a user's files importing the package
// by its name (resolved to this package's own build, dist/), against real
// servers.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createClient } from "../src/node.js";
import { startServer, type TestServer } from "../src/testing.js";
import { addr, holdfastBin, makeCerts, needsBinary, needsServer, recordingLogger, type Certs } from "./helpers.js";

// build-test/test/readme.test.js -> sdk-ts/
const pkg = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const readme = readFileSync(join(pkg, "README.md"), "utf8");
const snippets = new Map([...readme.matchAll(/<!-- snippet: (\S+) -->\n```js\n([\s\S]*?)```/g)].map((m) => [m[1], m[2]]));
// Inside the package, so that "@holdfast/sdk" resolves to it by name.
const dir = join(pkg, "build-test", "readme");

const run = promisify(execFile);

/** Runs snippet name with node (extra args first) and the given environment; resolves to its stdout. */
async function runSnippet(name: string, env: Record<string, string>, nodeArgs: string[] = []): Promise<string> {
  const code = snippets.get(name);
  assert.ok(code, `README has no snippet ${name} (has: ${[...snippets.keys()].join(", ")})`);
  mkdirSync(dir, { recursive: true });
  const file = join(dir, name);
  writeFileSync(file, code);
  // As a user runs it: not as a child of this test runner (which node:test
  // tells its children through NODE_TEST_CONTEXT, changing what they print).
  const userEnv: Record<string, string | undefined> = { ...process.env, ...env };
  delete userEnv.NODE_TEST_CONTEXT;
  try {
    const { stdout } = await run(process.execPath, [...nodeArgs, file], { env: userEnv, timeout: 60_000 });
    return stdout;
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string };
    assert.fail(`snippet ${name} failed: ${String(e)}\nstdout:\n${err.stdout ?? ""}\nstderr:\n${err.stderr ?? ""}`);
  }
}

describe("README snippets", () => {
  it("every snippet the tests know is in the README, and the quick start is examples/quickstart.mjs", () => {
    assert.deepEqual([...snippets.keys()].sort(), ["auth.mjs", "events.mjs", "primitives.mjs", "quickstart.mjs", "scheduled.mjs", "skip-if-held.mjs", "testing.test.mjs"]);
    const example = readFileSync(join(pkg, "examples", "quickstart.mjs"), "utf8");
    assert.ok(example.endsWith(snippets.get("quickstart.mjs")!), "examples/quickstart.mjs differs from the README's quick start");
  });

  describe("against the shared server", { skip: needsServer }, () => {
    it("quick start", async () => {
      const out = await runSnippet("quickstart.mjs", { HOLDFAST_ADDR: addr! });
      assert.match(out, /held by \S+ \(code not_acquired\)/);
      assert.match(out, /working with fencing token \d+/);
    });

    it("skip if held: runs when free, skips while someone holds the key", async () => {
      assert.match(await runSnippet("skip-if-held.mjs", { HOLDFAST_ADDR: addr! }), /^built with fencing token \d+$/m);
      const c = createClient(addr!, { logger: recordingLogger() });
      const g = await c.lock("jobs/nightly-report").ttl("1m").acquire();
      try {
        assert.match(await runSnippet("skip-if-held.mjs", { HOLDFAST_ADDR: addr! }), /skipped/);
      } finally {
        await g.unlock();
        await c.close();
      }
    });

    it("scheduled jobs: runs when free, skips while another server runs it", async () => {
      assert.match(await runSnippet("scheduled.mjs", { HOLDFAST_ADDR: addr! }), /^report written with fencing token \d+$/m);
      const c = createClient(addr!, { logger: recordingLogger() });
      const g = await c.lock("jobs/nightly-report").ttl("1m").acquire();
      try {
        assert.match(await runSnippet("scheduled.mjs", { HOLDFAST_ADDR: addr! }), /another server runs jobs\/nightly-report/);
      } finally {
        await g.unlock();
        await c.close();
      }
    });

    it("semaphores and read-write locks: permits, a reader, then a writer alone; readers keep a writer out", async () => {
      const out = await runSnippet("primitives.mjs", { HOLDFAST_ADDR: addr! });
      assert.match(out, /^encoding with 2 of 3 permits, fencing token \d+$/m);
      assert.match(out, /^reading as shared, fencing token \d+$/m);
      assert.match(out, /^writing alone, fencing token \d+$/m);
      const c = createClient(addr!, { logger: recordingLogger() });
      const reader = await c.rwlock("config/routes").read().ttl("1m").acquire();
      try {
        assert.match(await runSnippet("primitives.mjs", { HOLDFAST_ADDR: addr! }), /^readers hold config\/routes$/m);
      } finally {
        await reader.unlock();
        await c.close();
      }
    });

    it("lease events", async () => {
      const out = await runSnippet("events.mjs", { HOLDFAST_ADDR: addr! });
      assert.match(out, /^renewed reports\/events$/m);
      assert.match(out, /^released reports\/events$/m);
    });
  });

  describe("against servers of their own", { skip: needsBinary }, () => {
    let certs: Certs;
    let server: TestServer;
    const token = randomBytes(24).toString("base64url");
    before(async () => {
      certs = makeCerts();
      const tokens = join(certs.dir, "tokens.json");
      writeFileSync(tokens, JSON.stringify([{ name: "billing", sha256: createHash("sha256").update(token).digest("hex"), prefixes: ["billing/"] }]));
      server = await startServer({
        bin: holdfastBin,
        args: ["--tls-cert", certs.serverCert, "--tls-key", certs.serverKey, "--tls-client-ca", certs.caCert, "--auth-tokens", tokens],
      });
    });
    after(async () => {
      await server?.stop();
      certs?.remove();
    });

    it("auth and TLS: a bearer token, a private CA and a client certificate", async () => {
      const out = await runSnippet("auth.mjs", {
        HOLDFAST_ADDR: server.address,
        HOLDFAST_TOKEN: token,
        HOLDFAST_CA: certs.caCert,
        HOLDFAST_CLIENT_CERT: certs.clientCert,
        HOLDFAST_CLIENT_KEY: certs.clientKey,
      });
      assert.match(out, /acquired billing\/invoices over TLS, fencing token \d+/);
    });

    it("the test helper, as a node:test file", async () => {
      const out = await runSnippet("testing.test.mjs", { HOLDFAST_BIN: holdfastBin! }, ["--test", "--test-reporter=tap"]);
      assert.match(out, /^# pass 1$/m);
      assert.match(out, /^# fail 0$/m);
    });
  });
});
