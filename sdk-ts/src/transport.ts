/**
 * What every entry point does to make a client: the SDK's own interceptor
 * (bearer token, headers) ahead of the user's, and the settings.
 */

import type { Interceptor as ConnectInterceptor, Transport } from "@connectrpc/connect";
import { Client } from "./client.js";
import { InvalidArgumentError } from "./errors.js";
import { settingsFrom, type ClientOptions } from "./options.js";
import { Session } from "./session.js";

/** Sets the bearer token and the extra headers on every request. */
function headerInterceptor(options: ClientOptions): ConnectInterceptor | undefined {
  const { bearerToken, headers } = options;
  if (bearerToken === undefined && headers === undefined) return undefined;
  if (bearerToken !== undefined && typeof bearerToken !== "string" && typeof bearerToken !== "function") {
    throw new InvalidArgumentError("holdfast: bearerToken: want a string or a function returning one");
  }
  if (typeof bearerToken === "string" && (bearerToken === "" || /[\r\n]/.test(bearerToken))) {
    throw new InvalidArgumentError("holdfast: bearerToken: empty, or contains a line break");
  }
  const fixed = Object.entries(headers ?? {});
  return (next) => async (req) => {
    for (const [name, value] of fixed) req.header.set(name, value);
    if (bearerToken !== undefined) {
      const token = typeof bearerToken === "string" ? bearerToken : await bearerToken();
      req.header.set("authorization", `Bearer ${token}`);
    }
    return next(req);
  };
}

/** The interceptors a transport is built with: the SDK's first (outermost), so the user's see the headers it set. */
export function interceptorsFor(options: ClientOptions): ConnectInterceptor[] {
  const own = headerInterceptor(options);
  const theirs = (options.interceptors ?? []) as readonly ConnectInterceptor[];
  return own ? [own, ...theirs] : [...theirs];
}

/** A client over a ready transport; throws InvalidArgumentError for bad options. */
export function clientOver(transport: Transport, options: ClientOptions, defaultHolder: string): Client {
  return Client.over(new Session(transport, settingsFrom(options, defaultHolder)));
}
