// Compiled by `npm run lint` against the built package (dist/), never run.
import {
  NotAcquiredError,
  consoleLogger,
  createClient,
  type Client,
  type ErrorCode,
  type Grant,
  type GrantMode,
  type Guard,
  type Inspection,
  type Kind,
  type KeyDelay,
  type LeaseEvent,
  type RunResult,
} from "@holdfast/sdk";
import { startServer, type TestServer } from "@holdfast/sdk/testing";
import { createClient as createWebClient } from "@holdfast/sdk/web";

export async function use(server: TestServer): Promise<RunResult<bigint>> {
  const client: Client = createClient(server.address, {
    bearerToken: () => Promise.resolve("token"),
    tls: { ca: "PEM" },
    logger: consoleLogger("debug"),
    onLeaseEvent: (e: LeaseEvent) => {
      if (e.type === "lost") console.warn(e.reason, e.error.message);
    },
  });
  const guard: Guard | undefined = await client.lock("k").ttl("30s").tryAcquire();
  await guard?.unlock();
  const code: ErrorCode = new NotAcquiredError("k", undefined).code;
  void code;
  const set: Guard = await client.lock("accounts/1", "accounts/2").lockDelay("5s").acquire();
  const tokens: bigint[] = set.keys.map((k) => set.fencingTokenFor(k));
  void tokens;
  await set.unlock();
  const seen: Inspection = await client.inspectDelay("k");
  const delay: KeyDelay | undefined = seen.delay;
  const lockDelayMs: number | undefined = seen.state?.lockDelayMs ?? delay?.remainingMs;
  void lockDelayMs;
  const notAcquired = new NotAcquiredError("a", undefined, { keys: ["a", "b"], delay });
  void notAcquired.keys;
  void createWebClient("http://127.0.0.1:7410", { protocol: "grpc-web" });
  {
    await using started = await startServer({ args: ["--max-ttl", "1h"] });
    void started.pid;
  }
  const scheduled: RunResult<string> = await client.runScheduled({
    key: "jobs/k",
    maxRuntime: "1m",
    run: (signal: AbortSignal, token: bigint) => (signal.aborted ? "" : token.toString()),
  });
  void scheduled;
  {
    await using permits = await client.semaphore("jobs/encode", 3).permits(2).ttl("30s").acquire();
    const kind: Kind = permits.kind;
    const mode: GrantMode = permits.mode;
    void [kind, mode, permits.limit, permits.permits];
    await using reader = await client.rwlock("config").read().wait("5s").acquire();
    const holders: readonly Grant[] = (await client.inspect("config"))?.holders ?? [];
    void [reader.mode, holders.map((h) => h.permits)];
  }
  return client.lock("k").runIfFree((g) => g.fencingToken());
}
