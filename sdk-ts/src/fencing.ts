import { StaleTokenError } from "./errors.js";

/**
 * The check a fenced resource makes before accepting a write: token must not
 * be older than the highest token the resource has accepted (its watermark).
 * Returns the new watermark; throws StaleTokenError for a stale token.
 *
 * The resource, not the lock, is where safety is decided: a holder that
 * overran its lease still carries its old token, and this check refuses it
 * once the next holder (with a larger token) has written.
 */
export function validateWrite(token: bigint, watermark: bigint): bigint {
  if (token < watermark) throw new StaleTokenError(token, watermark);
  return token;
}
