/** The SDK's default logger and the levels it filters by. */

import type { Logger } from "./types.js";

export type LogLevel = "debug" | "info" | "warn" | "error";

const rank: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * A logger writing to `console` from `level` up (default "warn": renewal
 * failures and lost leases show; renewals and releases do not). Pass
 * `consoleLogger("debug")` as the `logger` option to see everything.
 */
export function consoleLogger(level: LogLevel = "warn"): Logger {
  const min = rank[level];
  const write =
    (at: LogLevel, sink: (...args: unknown[]) => void) =>
    (message: string, fields?: Record<string, unknown>): void => {
      if (rank[at] < min) return;
      if (fields && Object.keys(fields).length > 0) sink(`holdfast: ${message}`, fields);
      else sink(`holdfast: ${message}`);
    };
  return {
    debug: write("debug", console.debug),
    info: write("info", console.info),
    warn: write("warn", console.warn),
    error: write("error", console.error),
  };
}
