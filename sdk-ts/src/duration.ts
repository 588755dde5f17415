/**
 * Durations as users write them (milliseconds as a number, or a string with
 * a unit) and the SDK's own limits on them. Every refusal is an
 * InvalidArgumentError naming the field, the value with its unit and the
 * limit, raised before anything is sent.
 */

import { InvalidArgumentError } from "./errors.js";

/**
 * A duration: milliseconds as a number (`1500`), or a string with units as
 * Go writes them: `"500ms"`, `"30s"`, `"2m"`, `"1h"`, `"1m30s"`, `"1.5s"`.
 */
export type Duration = number | string;

/** The shortest TTL the SDK accepts: the watchdog renews at TTL/3. */
export const MIN_TTL_MS = 100;

const unitMs: Partial<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };
const part = /(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)/y;

const numberHint = " (TypeScript durations are milliseconds)";
const formatHint = 'use milliseconds (a number) or a string such as "500ms", "30s", "2m", "1h"';

/**
 * Parses a duration to milliseconds. Throws InvalidArgumentError for text
 * that is not a duration and for NaN or infinite numbers; the range is the
 * caller's to check.
 */
export function parseDuration(field: string, value: Duration): number {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new InvalidArgumentError(`holdfast: ${field}: ${value} is not a finite duration; ${formatHint}`);
    return value;
  }
  if (typeof value !== "string") {
    throw new InvalidArgumentError(`holdfast: ${field}: ${String(value)} is not a duration; ${formatHint}`);
  }
  const text = value.trim();
  let sign = 1;
  let rest = text;
  if (rest.startsWith("-")) {
    sign = -1;
    rest = rest.slice(1);
  }
  if (rest === "0") return 0;
  let ms = 0;
  let at = 0;
  while (at < rest.length) {
    part.lastIndex = at;
    const m = part.exec(rest);
    if (!m) break;
    ms += Number(m[1]) * (unitMs[m[2]] ?? NaN);
    at = part.lastIndex;
  }
  if (rest === "" || at !== rest.length) {
    throw new InvalidArgumentError(`holdfast: ${field}: ${JSON.stringify(value)} is not a duration; ${formatHint}`);
  }
  return sign * ms;
}

/** A duration for messages: "3ms", "1.5s", "2m", "1h30m" (as Go prints them, without zero units). */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  if (ms < 0) return `-${formatDuration(-ms)}`;
  if (ms < 1_000) return `${round(ms)}ms`;
  if (ms < 60_000) return `${round(ms / 1_000)}s`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = round((ms % 60_000) / 1_000);
  return `${h ? `${h}h` : ""}${m ? `${m}m` : ""}${s ? `${s}s` : ""}`;
}

function round(v: number): number {
  return Math.round(v * 1_000) / 1_000;
}

/** The value as the user wrote it, for messages: a number gets its unit and a reminder of what numbers mean. */
function shown(value: Duration, ms: number): { text: string; hint: string } {
  return typeof value === "number" ? { text: formatDuration(ms), hint: numberHint } : { text: JSON.stringify(value), hint: "" };
}

/** A lease length: at least MIN_TTL_MS and finite (the server checks its own upper bound). */
export function checkTtl(value: Duration, field = "ttl"): number {
  const ms = parseDuration(field, value);
  if (ms < MIN_TTL_MS) {
    const { text, hint } = shown(value, ms);
    throw new InvalidArgumentError(`holdfast: ${field}: ${text} is below the SDK minimum ${formatDuration(MIN_TTL_MS)}${hint}`);
  }
  return ms;
}

/** A wait: not negative, finite; 0 means one attempt. */
export function checkWait(value: Duration): number {
  const ms = parseDuration("wait", value);
  if (ms < 0) {
    const { text, hint } = shown(value, ms);
    throw new InvalidArgumentError(`holdfast: wait: ${text} is negative; the minimum is 0 (one attempt)${hint}`);
  }
  return ms;
}

/** A duration option that must be above zero (timeouts, budgets, backoff delays). */
export function checkPositive(field: string, value: Duration): number {
  const ms = parseDuration(field, value);
  if (ms <= 0) {
    const { text, hint } = shown(value, ms);
    throw new InvalidArgumentError(`holdfast: ${field}: ${text} must be above 0${hint}`);
  }
  return ms;
}

/** A duration option that may be 0 but not negative. */
export function checkNonNegative(field: string, value: Duration): number {
  const ms = parseDuration(field, value);
  if (ms < 0) {
    const { text, hint } = shown(value, ms);
    throw new InvalidArgumentError(`holdfast: ${field}: ${text} is negative; the minimum is 0${hint}`);
  }
  return ms;
}
