// Unit tests that need no server: the HLC port and validateWrite.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Clock, ClockOffsetError, StaleTokenError, Timestamp, validateWrite } from "../src/node.js";

describe("hlc", () => {
  it("now() strictly increases even when the physical clock stands still or goes back", () => {
    let pt = 1_000n;
    const c = new Clock({ physical: () => pt });
    const a = c.now();
    const b = c.now();
    pt = 500n; // the wall clock jumped back
    const d = c.now();
    assert.ok(a.before(b) && b.before(d), `${a} < ${b} < ${d}`);
    pt = 2_000n;
    assert.deepEqual(c.now(), new Timestamp(2_000n, 0));
  });

  it("update() moves past the remote stamp and every earlier reading", () => {
    const pt = 1_000n;
    const c = new Clock({ physical: () => pt, maxOffsetMs: 1 });
    c.now();
    const remote = new Timestamp(1_500n, 7);
    const got = c.update(remote);
    assert.ok(got.after(remote));
    assert.deepEqual(got, new Timestamp(1_500n, 8));
    // Same wall time on both sides: max logical + 1.
    assert.deepEqual(c.update(new Timestamp(1_500n, 3)), new Timestamp(1_500n, 9));
    // A zero stamp only ticks.
    assert.deepEqual(c.update(Timestamp.ZERO), new Timestamp(1_500n, 10));
  });

  it("update() refuses a stamp beyond the max offset and leaves the clock alone", () => {
    const c = new Clock({ physical: () => 1_000_000_000n, maxOffsetMs: 500 });
    const before = c.now();
    assert.throws(() => c.update(new Timestamp(1_000_000_000n + 600_000_000n, 0)), ClockOffsetError);
    assert.deepEqual(c.last(), before);
    // observe() trusts its source.
    assert.ok(c.observe(new Timestamp(5_000_000_000n, 0)).after(new Timestamp(5_000_000_000n, 0)));
  });

  it("next() carries a full logical counter into the wall time", () => {
    assert.deepEqual(new Timestamp(5n, 0xffff_ffff).next(), new Timestamp(6n, 0));
  });

  it("round-trips through the wire form; zero is unset", () => {
    assert.equal(Timestamp.ZERO.toProto(), undefined);
    const t = new Timestamp(123n, 4);
    assert.deepEqual(Timestamp.fromProto(t.toProto()), t);
  });
});

describe("validateWrite", () => {
  it("accepts equal and newer tokens and returns the new watermark", () => {
    assert.equal(validateWrite(5n, 5n), 5n);
    assert.equal(validateWrite(9n, 5n), 9n);
  });
  it("refuses an older token", () => {
    assert.throws(() => validateWrite(4n, 5n), StaleTokenError);
  });
});
