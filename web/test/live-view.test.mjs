// @ts-check
// End-to-end test of the live view: a real `holdfast serve` (embedded memory
// backend), Debian's Chromium driven by playwright-core, locks taken and
// given up through the API's Connect JSON endpoint, and the page checked with
// Playwright's auto-waiting locators (no sleeps). A screenshot of the page
// goes to web/artifacts/ (or $HOLDFAST_ARTIFACTS_DIR).
//
// Needs: node >= 20, `npm ci` in web/, /usr/bin/chromium
// (scripts/setup.d/60-chromium.sh; or $HOLDFAST_CHROMIUM), and a holdfast
// binary that embeds the built page: $HOLDFAST_BIN_DIR/holdfast (`make
// build`), else one built here by `go build` after `node build.mjs`.
import { spawn, execFileSync } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const webDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const repo = join(webDir, "..");
const WAIT = 15_000; // per UI assertion; generous for a loaded 2-core machine
const artifacts = process.env.HOLDFAST_ARTIFACTS_DIR || join(webDir, "artifacts");
const chromiumPath = process.env.HOLDFAST_CHROMIUM || "/usr/bin/chromium";

/** @type {string} */
let holdfastBin;
/** @type {string | undefined} */
let buildDir;
/** @type {import("playwright-core").Browser} */
let browser;

before(async () => {
  if (!existsSync(chromiumPath)) {
    throw new Error(`no Chromium at ${chromiumPath}: run scripts/setup.d/60-chromium.sh (or set HOLDFAST_CHROMIUM)`);
  }
  if (process.env.HOLDFAST_BIN_DIR) {
    holdfastBin = join(process.env.HOLDFAST_BIN_DIR, "holdfast");
    if (!existsSync(holdfastBin)) throw new Error(`${holdfastBin} not found: run 'make build'`);
  } else {
    // The page must be in the binary: build the bundle, then the server.
    buildDir = mkdtempSync(join(tmpdir(), "holdfast-web-test-"));
    execFileSync(process.execPath, [join(webDir, "build.mjs")], { stdio: "inherit" });
    execFileSync("go", ["build", "-o", buildDir, "./server/cmd/holdfast"], { cwd: repo, stdio: "inherit" });
    holdfastBin = join(buildDir, "holdfast");
  }
  browser = await chromium.launch({
    executablePath: chromiumPath,
    // Chromium as root needs --no-sandbox; the network flags keep it from
    // calling home on a machine with no route out.
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
  if (buildDir) rmSync(buildDir, { recursive: true, force: true });
});

/**
 * Starts `holdfast serve --addr 127.0.0.1:0 ...args` and resolves once its
 * readiness line is on stdout.
 * @param {string[]} args
 * @returns {Promise<{ url: string, stop: () => Promise<number | null> }>}
 */
async function startServer(args = []) {
  const proc = spawn(holdfastBin, ["serve", "--addr", "127.0.0.1:0", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  /** @type {string[]} */
  const logs = [];
  proc.stderr.setEncoding("utf8");
  proc.stderr.on("data", (/** @type {string} */ d) => logs.push(d));
  const exited = once(proc, "exit");
  const lines = createInterface({ input: proc.stdout });
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no readiness line within 60s; stderr:\n${logs.join("")}`)), 60_000);
    lines.on("line", (line) => {
      const m = /^holdfast serving addr=(\S+) /.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(([code]) => {
      clearTimeout(timer);
      reject(new Error(`holdfast exited (${code}) before it was ready; stderr:\n${logs.join("")}`));
    });
  });
  const addr = await ready;
  return {
    url: `http://${addr}`,
    stop: async () => {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      const [code] = await exited;
      return code;
    },
  };
}

/**
 * Calls a LockService method through the Connect protocol's JSON encoding.
 * @param {string} base
 * @param {string} method
 * @param {object} body
 * @param {string} [token]
 */
async function call(base, method, body, token) {
  /** @type {Record<string, string>} */
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(`${base}/holdfast.lock.v1.LockService/${method}`, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method}: HTTP ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

/**
 * Waits until the element has exactly this text.
 * @param {import("playwright-core").Locator} loc
 * @param {string | RegExp} text
 */
async function expectText(loc, text) {
  const exact = typeof text === "string" ? new RegExp(`^${text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`) : text;
  await loc.filter({ hasText: exact }).first().waitFor({ timeout: WAIT });
}

/**
 * @param {import("playwright-core").Page} page
 * @param {string} key
 */
const row = (page, key) => page.locator(`#locks-body tr[data-key="${key}"]`);

/**
 * Waits until key's rows name exactly these fencing tokens, in order (one
 * row per grant; [] for a key no longer shown).
 * @param {import("playwright-core").Page} page
 * @param {string} key
 * @param {(string | number)[]} tokens
 */
async function expectGrants(page, key, tokens) {
  const want = tokens.map(String).join(",");
  try {
    await page.waitForFunction(([k, w]) => {
      const rows = globalThis.document.querySelectorAll(`#locks-body tr[data-key="${k}"][data-token]`);
      return [...rows].map((r) => r.getAttribute("data-token")).join(",") === w;
    }, [key, want], { timeout: WAIT });
  } catch (err) {
    const got = await page.locator(`#locks-body tr[data-key="${key}"][data-token]`).evaluateAll((rows) => rows.map((r) => r.getAttribute("data-token")));
    throw new Error(`rows of ${key}: want tokens [${want}], have [${got.join(",")}]`, { cause: err });
  }
}

/**
 * The row of one grant of a key.
 * @param {import("playwright-core").Page} page
 * @param {string} key
 * @param {string | number} token
 */
const grantRow = (page, key, token) => page.locator(`#locks-body tr[data-key="${key}"][data-token="${token}"]`);

/**
 * The value shown for an election's leader of this term (on its own row,
 * below the leader's).
 * @param {import("playwright-core").Page} page
 * @param {string} key
 * @param {string | number} term
 */
const leaderValue = (page, key, term) => page.locator(`#locks-body tr.value-row[data-key="${key}"][data-value-token="${term}"] .value`);

describe("live view", () => {
  test("shows backend facts, held locks with a ticking time left and waiters, and the event stream", async () => {
    const server = await startServer();
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    /** @type {string[]} */
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    try {
      const res = await page.goto(`${server.url}/ui/?prefix=demo/`);
      assert.equal(res?.status(), 200, "GET /ui/: the binary was built without the page? run 'make build'");

      // Backend facts from GetServerInfo.
      await expectText(page.locator('#facts dd[data-fact="backend"]'), "memory");
      await expectText(page.locator('#facts dd[data-fact="shared"]'), "no");
      await expectText(page.locator('#facts dd[data-fact="durable"]'), "no");
      await expectText(page.locator('#facts dd[data-fact="granularity"]'), /^\d/);
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });
      assert.equal(await page.locator("#prefix").inputValue(), "demo/");

      // A lock outside the prefix never shows; one inside does.
      await call(server.url, "Acquire", { key: "other/x", ttl: "30s", holder: "elsewhere" });
      const a = await call(server.url, "Acquire", { key: "demo/alpha", ttl: "30s", holder: "e2e-writer pid 1" });
      assert.equal(a.acquired, true);
      const first = a.lease.fencingToken;
      const r = row(page, "demo/alpha");
      await expectText(r.locator("td.key"), "demo/alpha");
      await expectText(r.locator("td.holder"), "e2e-writer pid 1");
      await expectText(r.locator("td.token"), String(first));
      await expectText(r.locator("td.left"), /^[1-3]?\d\.\ds$/); // under the 30s TTL, in tenths
      // Time left ticks down (the page counts it against the server's clock).
      const before = await r.locator("td.left").textContent();
      await r.locator("td.left").filter({ hasNotText: before ?? "" }).waitFor({ timeout: WAIT });
      await expectText(page.locator('#events li[data-type="acquired"][data-key="demo/alpha"] .token'), `#${first}`);

      // A waiter queued on the server shows in the waiters column.
      const waiting = call(server.url, "Acquire", { key: "demo/alpha", ttl: "30s", wait: "20s", holder: "e2e-waiter" });
      await expectText(r.locator("td.waiters"), "1");

      // Release: the waiter takes over with a higher fencing token.
      const rel = await call(server.url, "Release", { key: "demo/alpha", ownerToken: a.lease.ownerToken });
      assert.equal(rel.released, true);
      const w = await waiting;
      assert.equal(w.acquired, true);
      assert.ok(BigInt(w.lease.fencingToken) > BigInt(first));
      await expectText(r.locator("td.holder"), "e2e-waiter");
      await expectText(r.locator("td.token"), String(w.lease.fencingToken));
      await expectText(r.locator("td.waiters"), "0");

      // A second key, to show more than one row; then a screenshot.
      const b = await call(server.url, "Acquire", { key: "demo/beta", ttl: "90s", holder: "batch-job@host-7" });
      await expectText(row(page, "demo/beta").locator("td.holder"), "batch-job@host-7");
      mkdirSync(artifacts, { recursive: true });
      const shot = join(artifacts, "live-view.png");
      await page.screenshot({ path: shot, fullPage: true });
      console.log(`screenshot: ${shot}`);

      // Releases empty the table; the stream shows both kinds of events.
      await call(server.url, "Release", { key: "demo/alpha", ownerToken: w.lease.ownerToken });
      await call(server.url, "Release", { key: "demo/beta", ownerToken: b.lease.ownerToken });
      await page.locator("#locks-body tr").first().waitFor({ state: "detached", timeout: WAIT });
      await page.locator("#locks-empty").waitFor({ state: "visible", timeout: WAIT });
      await expectText(page.locator('#events li[data-type="released"][data-key="demo/alpha"] .token'), `#${first}`);
      await expectText(page.locator('#events li[data-type="released"][data-key="demo/beta"] .token'), `#${b.lease.fencingToken}`);
      await expectText(page.locator('#events li[data-type="acquired"][data-key="demo/alpha"] .holder').first(), "e2e-waiter");
      assert.equal(await page.locator('#events li[data-key="other/x"]').count(), 0, "an event outside the prefix was shown");

      // An expiry shows as expired.
      const e = await call(server.url, "Acquire", { key: "demo/short", ttl: "1s", holder: "short-lived" });
      await expectText(row(page, "demo/short").locator("td.holder"), "short-lived");
      await expectText(page.locator('#events li[data-type="expired"][data-key="demo/short"] .token'), `#${e.lease.fencingToken}`);
      await row(page, "demo/short").waitFor({ state: "detached", timeout: WAIT });

      assert.deepEqual(pageErrors, []);

      // The server going away shows, and the page keeps trying.
      assert.equal(await server.stop(), 0, "holdfast serve did not exit 0 on SIGTERM");
      await page.locator('#status[data-state="reconnecting"]').waitFor({ timeout: WAIT });
      await page.locator("#banner").waitFor({ state: "visible", timeout: WAIT });
    } finally {
      await page.close();
      assert.equal(await server.stop(), 0, "holdfast serve did not exit 0 on SIGTERM");
    }
  });

  test("shows every kind truthfully: a mutex holder, a semaphore's permits, a read-write lock's readers or writer", async () => {
    const server = await startServer();
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    /** @type {string[]} */
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    const sem = (/** @type {string} */ holder, permits = 1, wait = "0s") =>
      call(server.url, "Acquire", { key: "prim/sem", ttl: "60s", wait, holder, kind: "KIND_SEMAPHORE", limit: 3, permits });
    const rw = (/** @type {string} */ holder, /** @type {string} */ mode, wait = "0s") =>
      call(server.url, "Acquire", { key: "prim/rw", ttl: "60s", wait, holder, kind: "KIND_RWLOCK", mode });
    try {
      await page.goto(`${server.url}/ui/?prefix=prim/`);
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });

      // A mutex: one row, its holder.
      const m = await call(server.url, "Acquire", { key: "prim/mutex", ttl: "60s", holder: "mutex-holder" });
      await expectGrants(page, "prim/mutex", [m.lease.fencingToken]);
      const mr = grantRow(page, "prim/mutex", m.lease.fencingToken);
      await expectText(mr.locator("td.kind"), "mutex");
      await expectText(mr.locator("td.holder"), "mutex-holder");
      await expectText(mr.locator("td.holds"), "—");

      // A semaphore of limit 3: three holders of one permit each, all shown.
      const s1 = await sem("sem-a"), s2 = await sem("sem-b"), s3 = await sem("sem-c");
      for (const s of [s1, s2, s3]) assert.equal(s.acquired, true);
      const [t1, t2, t3] = [s1, s2, s3].map((s) => s.lease.fencingToken);
      await expectGrants(page, "prim/sem", [t1, t2, t3]);
      await expectText(page.locator('tr[data-key="prim/sem"] td.kind .kind-name'), "semaphore");
      await expectText(page.locator('tr[data-key="prim/sem"] td.kind .usage'), "3 of 3 permits");
      await expectText(grantRow(page, "prim/sem", t2).locator("td.holder"), "sem-b");
      await expectText(grantRow(page, "prim/sem", t2).locator("td.holds"), "1 permit");
      // A waiter for 2 permits queues behind them.
      const big = sem("sem-big", 2, "20s");
      await expectText(page.locator('tr[data-key="prim/sem"] td.waiters'), "1");
      // The release of one of three leaves the other two (a Watch event is
      // about one grant, never the whole key); 2 permits do not fit yet.
      assert.equal((await call(server.url, "Release", { key: "prim/sem", ownerToken: s2.lease.ownerToken })).released, true);
      await expectGrants(page, "prim/sem", [t1, t3]);
      await expectText(page.locator('tr[data-key="prim/sem"] td.kind .usage'), "2 of 3 permits");
      await expectText(page.locator('#events li[data-type="released"][data-key="prim/sem"] .token'), `#${t2}`);
      // Another release lets the waiter in with its 2 permits.
      assert.equal((await call(server.url, "Release", { key: "prim/sem", ownerToken: s1.lease.ownerToken })).released, true);
      const b = await big;
      assert.equal(b.acquired, true);
      await expectGrants(page, "prim/sem", [t3, b.lease.fencingToken]);
      await expectText(grantRow(page, "prim/sem", b.lease.fencingToken).locator("td.holds"), "2 permits");
      await expectText(page.locator('tr[data-key="prim/sem"] td.kind .usage'), "3 of 3 permits");
      await expectText(page.locator('tr[data-key="prim/sem"] td.waiters'), "0");

      // A read-write lock: two readers share it, a writer waits for both.
      const r1 = await rw("reader-1", "MODE_SHARED"), r2 = await rw("reader-2", "MODE_SHARED");
      await expectGrants(page, "prim/rw", [r1.lease.fencingToken, r2.lease.fencingToken]);
      await expectText(page.locator('tr[data-key="prim/rw"] td.kind .kind-name'), "rwlock");
      await expectText(page.locator('tr[data-key="prim/rw"] td.kind .usage'), "2 readers");
      await expectText(grantRow(page, "prim/rw", r1.lease.fencingToken).locator("td.holds"), "reader");
      const writer = rw("the-writer", "MODE_EXCLUSIVE", "20s");
      await expectText(page.locator('tr[data-key="prim/rw"] td.waiters'), "1");

      // The page's List (a reload) shows what the events built.
      mkdirSync(artifacts, { recursive: true });
      const shot = join(artifacts, "live-view-kinds.png");
      await page.screenshot({ path: shot, fullPage: true });
      console.log(`screenshot: ${shot}`);
      await page.reload();
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });
      await expectGrants(page, "prim/mutex", [m.lease.fencingToken]);
      await expectGrants(page, "prim/sem", [t3, b.lease.fencingToken]);
      await expectText(page.locator('tr[data-key="prim/sem"] td.kind .usage'), "3 of 3 permits");
      await expectGrants(page, "prim/rw", [r1.lease.fencingToken, r2.lease.fencingToken]);
      await expectText(page.locator('tr[data-key="prim/rw"] td.kind .usage'), "2 readers");
      await expectText(page.locator('tr[data-key="prim/rw"] td.waiters'), "1");

      await call(server.url, "Release", { key: "prim/rw", ownerToken: r1.lease.ownerToken });
      await expectGrants(page, "prim/rw", [r2.lease.fencingToken]);
      await expectText(page.locator('tr[data-key="prim/rw"] td.kind .usage'), "1 reader");
      await call(server.url, "Release", { key: "prim/rw", ownerToken: r2.lease.ownerToken });
      const w = await writer;
      assert.equal(w.acquired, true);
      await expectGrants(page, "prim/rw", [w.lease.fencingToken]);
      await expectText(page.locator('tr[data-key="prim/rw"] td.kind .usage'), "writer");
      await expectText(grantRow(page, "prim/rw", w.lease.fencingToken).locator("td.holder"), "the-writer");
      await expectText(grantRow(page, "prim/rw", w.lease.fencingToken).locator("td.holds"), "writer");
      await expectText(page.locator('#events li[data-type="acquired"][data-key="prim/rw"] .holds').first(), "writer");

      // Everything released: nothing is shown.
      await call(server.url, "Release", { key: "prim/rw", ownerToken: w.lease.ownerToken });
      await call(server.url, "Release", { key: "prim/sem", ownerToken: s3.lease.ownerToken });
      await call(server.url, "Release", { key: "prim/sem", ownerToken: b.lease.ownerToken });
      await call(server.url, "Release", { key: "prim/mutex", ownerToken: m.lease.ownerToken });
      await page.locator("#locks-empty").waitFor({ state: "visible", timeout: WAIT });
      assert.equal(await page.locator("#locks-body tr").count(), 0);
      assert.deepEqual(pageErrors, []);
    } finally {
      await page.close();
      assert.equal(await server.stop(), 0, "holdfast serve did not exit 0 on SIGTERM");
    }
  });

  test("shows an election's leader with its term and value, updated by proclaims", async () => {
    const server = await startServer();
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    /** @type {string[]} */
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    const campaign = (/** @type {string} */ holder, /** @type {string} */ value, wait = "0s") =>
      call(server.url, "Acquire", { key: "elect/primary", ttl: "60s", wait, holder, kind: "KIND_ELECTION", value });
    try {
      await page.goto(`${server.url}/ui/?prefix=elect/`);
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });

      const a = await campaign("node-a", "http://10.0.0.1:8080");
      assert.equal(a.acquired, true);
      const termA = a.lease.fencingToken;
      await expectGrants(page, "elect/primary", [termA]);
      const ra = grantRow(page, "elect/primary", termA);
      await expectText(ra.locator("td.kind .kind-name"), "election");
      await expectText(ra.locator("td.kind .usage"), `term ${termA}`);
      await expectText(ra.locator("td.holder"), "node-a");
      await expectText(leaderValue(page, "elect/primary", termA), "“http://10.0.0.1:8080”");

      // A proclaim replaces the value in place: same term, a PROCLAIMED event.
      const p = await call(server.url, "Proclaim", { key: "elect/primary", ownerToken: a.lease.ownerToken, value: "http://10.0.0.1:9090" });
      assert.equal(p.proclaimed, true);
      await expectText(leaderValue(page, "elect/primary", termA), "“http://10.0.0.1:9090”");
      await expectText(ra.locator("td.kind .usage"), `term ${termA}`);
      await expectText(page.locator('#events li[data-type="proclaimed"][data-key="elect/primary"] .value'), "“http://10.0.0.1:9090”");

      // A second campaigner waits; when the leader resigns it leads with a
      // higher term and its own value.
      const b = campaign("node-b", "http://10.0.0.2:8080", "20s");
      await expectText(page.locator('tr[data-key="elect/primary"] td.waiters'), "1");
      mkdirSync(artifacts, { recursive: true });
      const shot = join(artifacts, "live-view-election.png");
      await page.screenshot({ path: shot, fullPage: true });
      console.log(`screenshot: ${shot}`);
      assert.equal((await call(server.url, "Release", { key: "elect/primary", ownerToken: a.lease.ownerToken })).released, true);
      const won = await b;
      assert.equal(won.acquired, true);
      const termB = won.lease.fencingToken;
      assert.ok(BigInt(termB) > BigInt(termA));
      await expectGrants(page, "elect/primary", [termB]);
      const rb = grantRow(page, "elect/primary", termB);
      await expectText(rb.locator("td.kind .usage"), `term ${termB}`);
      await expectText(rb.locator("td.holder"), "node-b");
      await expectText(leaderValue(page, "elect/primary", termB), "“http://10.0.0.2:8080”");

      // The deposed leader's proclaim is refused and changes nothing shown.
      const late = await call(server.url, "Proclaim", { key: "elect/primary", ownerToken: a.lease.ownerToken, value: "stale" });
      assert.equal(late.proclaimed ?? false, false);

      // The List (a reload) carries the value too.
      const p2 = await call(server.url, "Proclaim", { key: "elect/primary", ownerToken: won.lease.ownerToken, value: "" });
      assert.equal(p2.proclaimed, true);
      await expectText(leaderValue(page, "elect/primary", termB), "“”");
      await page.reload();
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });
      await expectGrants(page, "elect/primary", [termB]);
      await expectText(leaderValue(page, "elect/primary", termB), "“”");
      await expectText(rb.locator("td.kind .usage"), `term ${termB}`);
      assert.equal(await page.locator('#locks-body .value[data-value="stale"]').count(), 0);

      await call(server.url, "Release", { key: "elect/primary", ownerToken: won.lease.ownerToken });
      await page.locator("#locks-empty").waitFor({ state: "visible", timeout: WAIT });
      assert.deepEqual(pageErrors, []);
    } finally {
      await page.close();
      assert.equal(await server.stop(), 0, "holdfast serve did not exit 0 on SIGTERM");
    }
  });

  test("asks for a token when the API needs one, and sends it as a bearer token", async () => {
    const dir = mkdtempSync(join(tmpdir(), "holdfast-web-auth-"));
    const tokens = join(dir, "tokens.yaml");
    writeFileSync(tokens, [
      "- name: writer",
      "  token: writer-secret-0123456789",
      '  prefixes: ["team/"]',
      "- name: dashboard",
      "  token: dashboard-secret-0123456789",
      '  prefixes: [""]',
      "  read_only: true",
      "",
    ].join("\n"));
    const server = await startServer(["--auth-tokens", tokens]);
    const page = await browser.newPage();
    try {
      await page.goto(`${server.url}/ui/`);
      // Static files are public; the API is not.
      await page.locator('#status[data-state="unauthenticated"]').waitFor({ timeout: WAIT });
      await expectText(page.locator("#banner"), /unauthenticated/i);
      mkdirSync(artifacts, { recursive: true });
      const shot = join(artifacts, "live-view-needs-token.png");
      await page.screenshot({ path: shot });
      console.log(`screenshot: ${shot}`);

      const sent = page.waitForRequest(
        (r) => r.url().endsWith("/GetServerInfo") && r.headers()["authorization"] === "Bearer dashboard-secret-0123456789",
        { timeout: WAIT },
      );
      await page.locator("#token").fill("dashboard-secret-0123456789");
      await page.locator("#token-form button[type=submit]").click();
      await sent;
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });
      await expectText(page.locator('#facts dd[data-fact="backend"]'), "memory");
      assert.equal(await page.locator("#banner").isHidden(), true);

      const a = await call(server.url, "Acquire", { key: "team/report", ttl: "30s", holder: "writer" }, "writer-secret-0123456789");
      await expectText(row(page, "team/report").locator("td.token"), String(a.lease.fencingToken));

      // A token limited to team/ may not watch other/: the page says so.
      await page.locator("#token").fill("writer-secret-0123456789");
      await page.locator("#token-form button[type=submit]").click();
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });
      await page.locator("#prefix").fill("other/");
      await page.locator("#prefix").press("Enter");
      await expectText(page.locator("#status-text"), "not allowed");
      await expectText(page.locator("#banner"), /PermissionDenied/);
      await page.locator("#prefix").fill("team/");
      await page.locator("#prefix").press("Enter");
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });
      await expectText(row(page, "team/report").locator("td.holder"), "writer");

      // The token lives in this tab's sessionStorage: a reload keeps it.
      await page.reload();
      await page.locator('#status[data-state="live"]').waitFor({ timeout: WAIT });
      await expectText(row(page, "team/report").locator("td.holder"), "writer");
    } finally {
      await page.close();
      assert.equal(await server.stop(), 0, "holdfast serve did not exit 0 on SIGTERM");
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
