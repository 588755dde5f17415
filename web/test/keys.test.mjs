// @ts-check
// Unit tests of the page's key model (src/keys.ts): how Watch events about
// one grant and List snapshots of whole keys combine, for every kind. The
// module is bundled by esbuild into a temp dir and imported; no browser.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL, fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import * as esbuild from "esbuild";

const webDir = join(dirname(fileURLToPath(import.meta.url)), "..");
// lock.v1 enum values (Kind, Mode), as on the wire.
const MUTEX = 1, SEMAPHORE = 2, RWLOCK = 3, ELECTION = 4;
const SHARED = 1, EXCLUSIVE = 2;

/** @type {string} */
let dir;
/** @type {any} */
let keys;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "holdfast-web-keys-"));
  const out = join(dir, "keys.mjs");
  await esbuild.build({ entryPoints: [join(webDir, "src", "keys.ts")], outfile: out, bundle: true, format: "esm", platform: "neutral", logLevel: "warning" });
  keys = await import(pathToFileURL(out).href);
});

after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * A grant as the API sends it.
 * @param {number} token
 * @param {{ holder?: string, permits?: number, mode?: number, expires?: number, value?: string }} [o]
 */
function grant(token, o = {}) {
  return {
    fencingToken: BigInt(token), holder: o.holder ?? `h${token}`, permits: o.permits ?? 1, mode: o.mode ?? 0,
    expiresAt: { seconds: BigInt(o.expires ?? 100), nanos: 0 }, value: o.value ?? "",
  };
}

/**
 * A LockState: a List entry (every holder) or a Watch event's (one grant).
 * @param {string} key
 * @param {number} kind
 * @param {number} limit
 * @param {ReturnType<typeof grant>[]} holders
 * @param {number} [waiters]
 */
function state(key, kind, limit, holders, waiters = 0) {
  const first = holders[0];
  return {
    key, kind, limit, holders, waiters,
    permitsInUse: holders.reduce((n, g) => n + g.permits, 0),
    fencingToken: first?.fencingToken ?? 0n, holder: first?.holder ?? "", expiresAt: first?.expiresAt,
  };
}

/**
 * The tokens shown for key, in order ([] when the key is not shown).
 * @param {any} table
 * @param {string} key
 */
function tokens(table, key) {
  const v = table.keys.get(key);
  return v ? v.holders.map((/** @type {{ fencingToken: bigint }} */ g) => Number(g.fencingToken)) : [];
}

describe("key model", () => {
  test("a release of one of three semaphore holders leaves the other two", () => {
    const t = new keys.KeyTable();
    const gs = [grant(5), grant(6, { permits: 2 }), grant(7)];
    t.replace([state("jobs", SEMAPHORE, 4, gs)], []);
    assert.deepEqual(tokens(t, "jobs"), [5, 6, 7]);
    assert.equal(keys.inUse(t.keys.get("jobs")), 4);
    t.apply("released", state("jobs", SEMAPHORE, 4, [gs[1]]));
    assert.deepEqual(tokens(t, "jobs"), [5, 7]);
    assert.equal(keys.inUse(t.keys.get("jobs")), 2);
    t.apply("expired", state("jobs", SEMAPHORE, 4, [gs[0]]));
    t.apply("released", state("jobs", SEMAPHORE, 4, [gs[2]]));
    assert.equal(t.keys.has("jobs"), false, "a key whose last grant ended is still shown");
  });

  test("acquired events add holders one by one and keep token order", () => {
    const t = new keys.KeyTable();
    t.replace([], []);
    t.apply("acquired", state("rw", RWLOCK, 1024, [grant(3, { mode: SHARED })]));
    t.apply("acquired", state("rw", RWLOCK, 1024, [grant(1, { mode: SHARED })]));
    t.apply("acquired", state("rw", RWLOCK, 1024, [grant(2, { mode: SHARED })]));
    assert.deepEqual(tokens(t, "rw"), [1, 2, 3]);
    // The same event twice (a replay) adds nothing.
    t.apply("acquired", state("rw", RWLOCK, 1024, [grant(2, { mode: SHARED })]));
    assert.deepEqual(tokens(t, "rw"), [1, 2, 3]);
  });

  test("a List read before a release does not bring the released grant back", () => {
    const t = new keys.KeyTable();
    const gs = [grant(5), grant(6), grant(7)];
    t.replace([state("jobs", SEMAPHORE, 3, gs)], []);
    // The release arrives while the next List is in flight; that List was
    // read before it and still names 6.
    const rel = state("jobs", SEMAPHORE, 3, [gs[1]]);
    t.apply("released", rel);
    t.replace([state("jobs", SEMAPHORE, 3, gs)], [{ change: "released", state: rel }]);
    assert.deepEqual(tokens(t, "jobs"), [5, 7]);
    // A List as stale again still leaves it out; a fresh one agrees.
    t.replace([state("jobs", SEMAPHORE, 3, gs)], []);
    assert.deepEqual(tokens(t, "jobs"), [5, 7]);
    t.replace([state("jobs", SEMAPHORE, 3, [gs[0], gs[2]])], []);
    assert.deepEqual(tokens(t, "jobs"), [5, 7]);
  });

  test("events during a List are replayed over its result", () => {
    const t = new keys.KeyTable();
    t.replace([], []);
    const acq = state("jobs", SEMAPHORE, 3, [grant(8)]);
    t.apply("acquired", acq);
    // The List was read before 8 was granted.
    t.replace([state("jobs", SEMAPHORE, 3, [grant(5)])], [{ change: "acquired", state: acq }]);
    assert.deepEqual(tokens(t, "jobs"), [5, 8]);
  });

  test("a writer after readers: readers whose end was not seen yet cannot share with it", () => {
    const t = new keys.KeyTable();
    t.replace([state("rw", RWLOCK, 1024, [grant(1, { mode: SHARED }), grant(2, { mode: SHARED })])], []);
    t.apply("acquired", state("rw", RWLOCK, 1024, [grant(3, { mode: EXCLUSIVE, permits: 1024 })]));
    assert.deepEqual(tokens(t, "rw"), [3]);
    // A late event of a reader granted before the writer is stale.
    t.apply("acquired", state("rw", RWLOCK, 1024, [grant(2, { mode: SHARED })]));
    assert.deepEqual(tokens(t, "rw"), [3]);
    // The readers' release events arriving late change nothing.
    t.apply("released", state("rw", RWLOCK, 1024, [grant(1, { mode: SHARED })]));
    assert.deepEqual(tokens(t, "rw"), [3]);
  });

  test("a semaphore grant only displaces the grants it cannot share the limit with", () => {
    const t = new keys.KeyTable();
    t.replace([state("jobs", SEMAPHORE, 3, [grant(5, { permits: 1 }), grant(6, { permits: 2 })])], []);
    t.apply("acquired", state("jobs", SEMAPHORE, 3, [grant(7, { permits: 2 })]));
    // 6 (2 permits) and 7 (2 permits) never held together under limit 3; 5 may still hold.
    assert.deepEqual(tokens(t, "jobs"), [5, 7]);
  });

  test("a mutex shows one holder: a newer grant replaces the older", () => {
    const t = new keys.KeyTable();
    t.replace([state("m", MUTEX, 1, [grant(1)])], []);
    t.apply("acquired", state("m", MUTEX, 1, [grant(2, { holder: "next" })]));
    assert.deepEqual(tokens(t, "m"), [2]);
    assert.equal(t.keys.get("m").holders[0].holder, "next");
    t.apply("released", state("m", MUTEX, 1, [grant(1)]));
    assert.deepEqual(tokens(t, "m"), [2], "the late release of the old holder removed the new one");
  });

  test("a key used again as another kind shows the new kind only", () => {
    const t = new keys.KeyTable();
    t.replace([state("k", MUTEX, 1, [grant(1)])], []);
    t.apply("acquired", state("k", SEMAPHORE, 3, [grant(2)]));
    const v = t.keys.get("k");
    assert.equal(v.kind, SEMAPHORE);
    assert.equal(v.limit, 3);
    assert.deepEqual(tokens(t, "k"), [2]);
    // The old kind's late event is stale.
    t.apply("acquired", state("k", MUTEX, 1, [grant(1)]));
    assert.equal(t.keys.get("k").kind, SEMAPHORE);
  });

  test("a replayed acquired event does not undo an extend a List showed", () => {
    const t = new keys.KeyTable();
    t.replace([], []);
    const acq = state("m", MUTEX, 1, [grant(4, { expires: 100 })]);
    t.apply("acquired", acq);
    t.replace([state("m", MUTEX, 1, [grant(4, { expires: 130 })])], [{ change: "acquired", state: acq }]);
    assert.equal(t.keys.get("m").holders[0].expiresAt.seconds, 130n);
  });

  test("an election: a proclaim changes the leader's value, a deposed leader's late proclaim changes nothing", () => {
    const t = new keys.KeyTable();
    t.replace([state("e", ELECTION, 1, [grant(7, { value: "first" })])], []);
    t.apply("proclaimed", state("e", ELECTION, 1, [grant(7, { value: "second" })]));
    assert.equal(t.keys.get("e").holders[0].value, "second");
    // A new leader (term 9) after 7's release.
    t.apply("released", state("e", ELECTION, 1, [grant(7, { value: "second" })]));
    t.apply("acquired", state("e", ELECTION, 1, [grant(9, { value: "new leader" })]));
    t.apply("proclaimed", state("e", ELECTION, 1, [grant(7, { value: "stale" })]));
    assert.deepEqual(tokens(t, "e"), [9]);
    assert.equal(t.keys.get("e").holders[0].value, "new leader");
    // A new leader whose predecessor's end was not seen replaces it.
    t.apply("acquired", state("e", ELECTION, 1, [grant(11, { value: "next" })]));
    assert.deepEqual(tokens(t, "e"), [11]);
  });

  test("an election: a proclaim seen during a List is kept over the List's older value", () => {
    const t = new keys.KeyTable();
    t.replace([state("e", ELECTION, 1, [grant(7, { value: "first" })])], []);
    const p = state("e", ELECTION, 1, [grant(7, { value: "second" })]);
    t.apply("proclaimed", p);
    // The List was read before the proclaim.
    t.replace([state("e", ELECTION, 1, [grant(7, { value: "first" })])], [{ change: "proclaimed", state: p }]);
    assert.equal(t.keys.get("e").holders[0].value, "second");
    // A replayed acquired event does not bring the campaign's value back.
    const acq = state("e", ELECTION, 1, [grant(7, { value: "first" })]);
    t.replace([state("e", ELECTION, 1, [grant(7, { value: "second" })])], [{ change: "acquired", state: acq }]);
    assert.equal(t.keys.get("e").holders[0].value, "second");
  });

  test("waiters follow the latest state of the key", () => {
    const t = new keys.KeyTable();
    t.replace([state("m", MUTEX, 1, [grant(1)], 2)], []);
    assert.equal(t.keys.get("m").waiters, 2);
    t.apply("acquired", state("m", MUTEX, 1, [grant(2)], 1));
    assert.equal(t.keys.get("m").waiters, 1);
  });
});
