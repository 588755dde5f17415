/**
 * holdfast client for Node.js (>= 20): Connect, gRPC-Web (HTTP/1.1) or gRPC
 * (HTTP/2) over @connectrpc/connect-node, with TLS options of Node's own.
 */
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { baseUrlFrom } from "./address.js";
import type { Client } from "./client.js";
import { InvalidArgumentError } from "./errors.js";
import type { ClientOptions } from "./options.js";
import { clientOver, interceptorsFor } from "./transport.js";
import { defaultHolder } from "./util.js";

export * from "./common.js";

/** TLS settings for an https:// address: PEM text (or Buffers), as Node's tls module takes them. */
export interface TlsOptions {
  /** CA certificates to trust instead of Node's bundled ones (a private CA). */
  ca?: string | Buffer | Array<string | Buffer>;
  /** Client certificate (chain) for mTLS; needs `key`. */
  cert?: string | Buffer;
  /** Private key of `cert`. */
  key?: string | Buffer;
  /** Server name to verify the certificate against, when it differs from the address's host. */
  servername?: string;
}

/** Options of the Node client: those of every client, and TLS. */
export interface NodeClientOptions extends ClientOptions {
  tls?: TlsOptions;
}

/**
 * Creates a client for the holdfast server at address ("http://127.0.0.1:7410",
 * "https://locks.internal:7410", or a bare "host:port" for http). protocol:
 * "connect" (default, HTTP/1.1), "grpc-web" (HTTP/1.1) or "grpc" (HTTP/2).
 */
export function createClient(address: string, options: NodeClientOptions = {}): Client {
  const url = baseUrlFrom(address);
  const baseUrl = url.href.replace(/\/$/, "");
  const { tls } = options;
  if (tls !== undefined && url.protocol !== "https:") {
    throw new InvalidArgumentError(`holdfast: tls: options given for ${JSON.stringify(address)}, which is not an https:// address`);
  }
  if (tls && (tls.cert === undefined) !== (tls.key === undefined)) {
    throw new InvalidArgumentError("holdfast: tls: cert and key go together (a client certificate needs its private key)");
  }
  const nodeOptions = tls ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.servername } : undefined;
  const interceptors = interceptorsFor(options);
  const holder = defaultHolder();
  switch (options.protocol ?? "connect") {
    case "grpc":
      return clientOver(createGrpcTransport({ baseUrl, interceptors, nodeOptions }), options, holder);
    case "grpc-web":
      return clientOver(createGrpcWebTransport({ baseUrl, interceptors, httpVersion: "1.1", nodeOptions }), options, holder);
    case "connect":
      return clientOver(createConnectTransport({ baseUrl, interceptors, httpVersion: "1.1", nodeOptions }), options, holder);
    default:
      throw new InvalidArgumentError(`holdfast: protocol ${JSON.stringify(options.protocol)}: want "connect", "grpc-web" or "grpc"`);
  }
}
