// Compiled by `npm run lint` against the built package (dist/) as CommonJS, never run.
import { createClient, validateWrite, type Guard } from "@holdfast/sdk";
import { startServer } from "@holdfast/sdk/testing";

export async function use(): Promise<bigint> {
  const server = await startServer();
  const client = createClient(server.address);
  const guard: Guard = await client.lock("k").wait(0).acquire();
  const watermark = validateWrite(guard.fencingToken(), 0n);
  await guard.unlock();
  await client.close();
  await server.stop();
  return watermark;
}
