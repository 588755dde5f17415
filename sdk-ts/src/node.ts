/**
 * holdfast client for Node.js (>= 20): Connect, gRPC-Web (HTTP/1.1) or gRPC
 * (HTTP/2) over @connectrpc/connect-node.
 */
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { hostname } from "node:os";
import { Client, type ClientOptions } from "./client.js";

export * from "./common.js";

/**
 * Creates a client for the holdfast server at baseUrl (e.g.
 * "http://127.0.0.1:7410"). protocol: "connect" (default, HTTP/1.1),
 * "grpc-web" (HTTP/1.1) or "grpc" (HTTP/2).
 */
export function createClient(baseUrl: string, options: ClientOptions = {}): Client {
  const opts: ClientOptions = { holder: `${hostname()} pid ${process.pid}`, ...options };
  if (opts.transport) return new Client(opts.transport, opts);
  switch (opts.protocol ?? "connect") {
    case "grpc":
      return new Client(createGrpcTransport({ baseUrl }), opts);
    case "grpc-web":
      return new Client(createGrpcWebTransport({ baseUrl, httpVersion: "1.1" }), opts);
    default:
      return new Client(createConnectTransport({ baseUrl, httpVersion: "1.1" }), opts);
  }
}
