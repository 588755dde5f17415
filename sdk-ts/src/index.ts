/**
 * holdfast client for browsers and any runtime with fetch: Connect or
 * gRPC-Web over @connectrpc/connect-web. Node picks ./node.js through the
 * package's "node" export condition.
 */
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { baseUrlFrom } from "./address.js";
import type { Client } from "./client.js";
import { InvalidArgumentError } from "./errors.js";
import type { ClientOptions } from "./options.js";
import { clientOver, interceptorsFor } from "./transport.js";

export * from "./common.js";

/**
 * Creates a client for the holdfast server at address ("http://127.0.0.1:7410",
 * "https://locks.example.com", or a bare "host:port" for http), speaking
 * Connect (default) or gRPC-Web. TLS is the browser's own.
 */
export function createClient(address: string, options: ClientOptions = {}): Client {
  const baseUrl = baseUrlFrom(address).href.replace(/\/$/, "");
  const interceptors = interceptorsFor(options);
  switch (options.protocol ?? "connect") {
    case "connect":
      return clientOver(createConnectTransport({ baseUrl, interceptors }), options, "browser");
    case "grpc-web":
      return clientOver(createGrpcWebTransport({ baseUrl, interceptors }), options, "browser");
    default:
      throw new InvalidArgumentError(`holdfast: protocol ${JSON.stringify(options.protocol)} is not available in browsers; use "connect" or "grpc-web"`);
  }
}
