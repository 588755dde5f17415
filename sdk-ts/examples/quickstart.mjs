// Take, extend and release a lock. Run a server first (`bin/holdfast serve`),
// then: npm run build && node examples/quickstart.mjs
import { createClient, LeaseLostError, NotAcquiredError, validateWrite } from "@holdfast/sdk";

const client = createClient(process.env.HOLDFAST_ADDR ?? "http://127.0.0.1:7410", { holder: "quickstart" });

// The guard's watchdog renews the 10 s lease about every 3 s while we work.
const guard = await client.lock("examples/report").ttl(10_000).acquire();
console.log(`acquired examples/report, fencing token ${guard.fencingToken()}`);

// Fence every write: the resource keeps the highest token it has seen and
// refuses older ones (a holder that overran its lease).
let watermark = 0n;
watermark = validateWrite(guard.fencingToken(), watermark);

// Stop the work if the lease is lost.
guard.signal.addEventListener("abort", () => {
  if (guard.signal.reason instanceof LeaseLostError) console.error("lease lost:", guard.signal.reason.message);
});

await guard.extend(20_000);
console.log(`extended: ${Math.round(guard.remainingMs())} ms left`);

// Someone else is refused while we hold it.
try {
  await client.lock("examples/report").ttl(10_000).acquire();
} catch (e) {
  if (e instanceof NotAcquiredError) console.log(`as expected, not acquired: held by ${e.current?.holder}`);
  else throw e;
}

// Resolves once the server confirmed the release; rejects with the
// LeaseLostError if the lease was lost meanwhile (never a quiet success).
await guard.unlock();
console.log("released");

// Or let withLock release it for you, also when the work throws.
const token = await client.withLock("examples/report", { ttlMs: 10_000 }, async (g) => g.fencingToken());
console.log(`withLock ran with token ${token}`);

await client.close();
