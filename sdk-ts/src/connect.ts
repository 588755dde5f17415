/**
 * "@holdfast/sdk/connect": what a custom Connect transport needs. The
 * service descriptor (LockService) and message schemas for a raw Connect
 * client, and a holdfast client over a transport you built yourself (a
 * fetch of your own, a proxy, Connect options the SDK does not expose).
 *
 * These typings import @connectrpc/connect, whose own typings need the DOM
 * lib (its Headers types); the package's main entry points do not.
 */
import type { Transport } from "@connectrpc/connect";
import type { Client } from "./client.js";
import type { ClientOptions } from "./options.js";
import { clientOver } from "./transport.js";
import { defaultHolder } from "./util.js";

export * from "./gen/holdfast/lock/v1/lock_pb.js";

/**
 * A holdfast client over transport. The transport's own interceptors run;
 * the `bearerToken`, `headers`, `interceptors` and `protocol` options do not
 * apply (put them on the transport).
 */
export function createClientWithTransport(transport: Transport, options: Omit<ClientOptions, "protocol" | "bearerToken" | "headers" | "interceptors"> = {}): Client {
  return clientOver(transport, options, defaultHolder());
}
