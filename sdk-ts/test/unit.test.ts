// Unit tests that need no server: the HLC port, validateWrite, durations,
// the backoff and the error codes.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BackoffPolicy, MarginPolicy } from "../src/backoff.js";
import { fromConnectError } from "../src/connect-errors.js";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  CanceledError,
  ClientClosedError,
  Clock,
  ClockOffsetError,
  DeadlineExceededError,
  HoldfastError,
  InvalidArgumentError,
  LeaseLostError,
  LockReleasedError,
  NotAcquiredError,
  PermissionDeniedError,
  ResourceExhaustedError,
  ServerError,
  StaleTokenError,
  Timestamp,
  UnauthenticatedError,
  UnavailableError,
  formatDuration,
  parseDuration,
  validateWrite,
} from "../src/node.js";

describe("hlc", () => {
  it("now() strictly increases even when the physical clock stands still or goes back", () => {
    let pt = 1_000n;
    const c = new Clock({ physical: () => pt });
    const a = c.now();
    const b = c.now();
    pt = 500n; // the wall clock jumped back
    const d = c.now();
    assert.ok(a.before(b) && b.before(d), `${a.toString()} < ${b.toString()} < ${d.toString()}`);
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
  it("refuses an older token with the stale-token error carrying both", () => {
    assert.throws(
      () => validateWrite(4n, 5n),
      (e: unknown) => e instanceof StaleTokenError && e.code === "stale_token" && e.token === 4n && e.watermark === 5n,
    );
  });
  it("is exact over 64 bits", () => {
    const big = 2n ** 63n + 1n;
    assert.equal(validateWrite(big, big - 1n), big);
    assert.throws(() => validateWrite(big - 1n, big), StaleTokenError);
  });
});

describe("durations", () => {
  it("numbers are milliseconds; strings carry Go's units", () => {
    assert.equal(parseDuration("ttl", 1500), 1500);
    for (const [text, ms] of [
      ["500ms", 500],
      ["30s", 30_000],
      ["2m", 120_000],
      ["1h", 3_600_000],
      ["1m30s", 90_000],
      ["1.5s", 1_500],
      ["0", 0],
    ] as const) {
      assert.equal(parseDuration("ttl", text), ms, text);
    }
  });
  it("refuses what is not a duration, naming the field", () => {
    for (const bad of ["", "30", "3 s", "1d", "s", "1.2.3s", "NaN"]) {
      assert.throws(() => parseDuration("wait", bad), (e: unknown) => e instanceof InvalidArgumentError && e.message.startsWith(`holdfast: wait: ${JSON.stringify(bad)} is not a duration`), bad);
    }
    assert.throws(() => parseDuration("wait", NaN), InvalidArgumentError);
    assert.throws(() => parseDuration("wait", -Infinity), InvalidArgumentError);
  });
  it("formats as Go prints, without zero units", () => {
    assert.deepEqual([3, 100, 1_500, 60_000, 90_000, 5_400_000].map(formatDuration), ["3ms", "100ms", "1.5s", "1m", "1m30s", "1h30m"]);
  });
});

describe("backoff", () => {
  it("defaults to 50 ms, doubling, capped at 1 s, with equal jitter in [d/2, d]", () => {
    const b = BackoffPolicy.from();
    const ceilings = [50, 100, 200, 400, 800, 1_000, 1_000, 1_000];
    for (let attempt = 0; attempt < ceilings.length; attempt++) {
      const d = ceilings[attempt];
      for (let i = 0; i < 200; i++) {
        const got = b.delay(attempt);
        assert.ok(got >= d / 2 && got <= d, `attempt ${attempt}: ${got} outside [${d / 2}, ${d}]`);
      }
    }
  });
  it("takes its shape from the options", () => {
    const b = BackoffPolicy.from({ initial: "10ms", max: "40ms", multiplier: 3 });
    assert.deepEqual([b.initialMs, b.maxMs, b.multiplier], [10, 40, 3]);
    assert.ok(b.delay(5) <= 40);
  });
});

describe("expiry margin", () => {
  it("defaults to TTL/100 + 20 ms", () => {
    assert.equal(MarginPolicy.from().marginMs(15_000), 170);
    assert.equal(MarginPolicy.from({ driftFactor: 0.1, fixed: "1s" }).marginMs(10_000), 2_000);
  });
});

describe("error codes", () => {
  it("every error the SDK makes carries its code", () => {
    const codes: [HoldfastError, string][] = [
      [new NotAcquiredError("k", undefined), "not_acquired"],
      [new LeaseLostError("k", "expired"), "lease_lost"],
      [new LockReleasedError("k"), "lock_released"],
      [new ClientClosedError(), "client_closed"],
      [new StaleTokenError(1n, 2n), "stale_token"],
      [new ClockOffsetError(Timestamp.ZERO, 1n, 500), "clock_offset"],
      [new InvalidArgumentError("x"), "invalid_argument"],
    ];
    for (const [err, code] of codes) {
      assert.ok(err instanceof HoldfastError);
      assert.equal(err.code, code, err.name);
    }
  });
  it("server answers map to classes with the Connect code's name", () => {
    const cases: [Code, new (...args: never[]) => HoldfastError, string][] = [
      [Code.InvalidArgument, InvalidArgumentError, "invalid_argument"],
      [Code.Unavailable, UnavailableError, "unavailable"],
      [Code.DeadlineExceeded, DeadlineExceededError, "deadline_exceeded"],
      [Code.Canceled, CanceledError, "canceled"],
      [Code.Unauthenticated, UnauthenticatedError, "unauthenticated"],
      [Code.PermissionDenied, PermissionDeniedError, "permission_denied"],
      [Code.ResourceExhausted, ResourceExhaustedError, "resource_exhausted"],
      [Code.FailedPrecondition, ServerError, "failed_precondition"],
      [Code.Unimplemented, ServerError, "unimplemented"],
      [Code.Internal, ServerError, "internal"],
      [Code.Unknown, ServerError, "unknown"],
    ];
    for (const [code, cls, name] of cases) {
      const err = fromConnectError(new ConnectError("boom", code), "acquire \"k\"");
      assert.ok(err instanceof cls, `${name}: ${err.name}`);
      assert.equal(err.code, name);
      assert.equal(err.message, `holdfast: acquire "k": boom`);
    }
  });
  it("a fetch that failed before any answer is unavailable", () => {
    const err = fromConnectError(new ConnectError("fetch failed", Code.Unknown, undefined, undefined, new TypeError("fetch failed")), "inspect");
    assert.ok(err instanceof UnavailableError);
  });
});
