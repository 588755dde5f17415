// The README's quick start (test/readme.test.ts checks the two agree).
// Run a server first (`bin/holdfast serve`), then:
//   npm run build && node examples/quickstart.mjs
import { createClient, NotAcquiredError, validateWrite } from "@holdfast/sdk";

const client = createClient(process.env.HOLDFAST_ADDR ?? "127.0.0.1:7410");

// Waits until the lock is free (or its signal aborts); the watchdog renews
// the 30 s lease every 10 s while you work.
const guard = await client.lock("reports/daily").ttl("30s").acquire();

// Fence every write: the resource keeps the highest token it accepted and
// refuses older ones (a holder that overran its lease).
let watermark = 0n;
watermark = validateWrite(guard.fencingToken(), watermark);
console.log(`write accepted; the resource's watermark is now ${watermark}`);

// wait(0): one attempt; a held key answers NotAcquiredError with the holder.
try {
  await client.lock("reports/daily").wait(0).acquire();
} catch (e) {
  if (!(e instanceof NotAcquiredError)) throw e;
  console.log(`held by ${e.current?.holder} (code ${e.code})`);
}

// Resolves once the server confirmed the release; rejects with the
// LeaseLostError if the lease was lost meanwhile (never a quiet success).
await guard.unlock();

// Or let withLock release it, also when the work throws.
await client.withLock("reports/daily", { ttl: "30s" }, async (g) => {
  console.log(`working with fencing token ${g.fencingToken()}`);
});
await client.close();
