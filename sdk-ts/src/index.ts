/**
 * holdfast client for browsers and any runtime with fetch: Connect or
 * gRPC-Web over @connectrpc/connect-web. Node picks ./node.js through the
 * package's "node" export condition.
 */
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { Client, type ClientOptions } from "./client.js";
import { InvalidArgumentError } from "./errors.js";

export * from "./common.js";

/**
 * Creates a client for the holdfast server at baseUrl (e.g.
 * "http://127.0.0.1:7410"), speaking Connect (default) or gRPC-Web.
 */
export function createClient(baseUrl: string, options: ClientOptions = {}): Client {
  if (options.transport) return new Client(options.transport, options);
  switch (options.protocol ?? "connect") {
    case "connect":
      return new Client(createConnectTransport({ baseUrl }), options);
    case "grpc-web":
      return new Client(createGrpcWebTransport({ baseUrl }), options);
    default:
      throw new InvalidArgumentError(`holdfast: protocol ${JSON.stringify(options.protocol)} is not available in browsers; use "connect" or "grpc-web"`);
  }
}
