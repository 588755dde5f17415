/** The server address a client is created with. */

import { InvalidArgumentError } from "./errors.js";

/**
 * Normalises a server address to the base URL Connect wants:
 * `http://host:port` and `https://host:port` as given (a path prefix, for a
 * proxy, is kept), a bare `host:port` as `http://host:port`. Anything else
 * is an InvalidArgumentError naming the address.
 */
export function baseUrlFrom(address: string): URL {
  const refuse = (why: string): never => {
    throw new InvalidArgumentError(
      `holdfast: address ${JSON.stringify(address)}: ${why}; want http://host:port, https://host:port or host:port`,
    );
  };
  if (typeof address !== "string" || address.trim() === "") refuse("empty");
  const text = address.trim();
  let url: URL;
  try {
    url = new URL(text.includes("://") ? text : `http://${text}`);
  } catch {
    return refuse("not a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") refuse(`scheme ${url.protocol.slice(0, -1)} is not http or https`);
  if (url.hostname === "") refuse("no host");
  if (url.username !== "" || url.password !== "") refuse("credentials in the address: use the bearerToken option");
  if (url.search !== "" || url.hash !== "") refuse("a query or fragment is not part of a server address");
  if (!text.includes("://") && url.port === "") refuse("no port");
  return url;
}
