// Formatting helpers, kept free of DOM access.

/** Time left as people read it: "1h 02m", "4m 05s", "12.3s", "0.4s". */
export function formatTimeLeft(ms: number): string {
  if (ms <= 0) return "expiring";
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h > 0) return `${h}h ${pad2(m)}m`;
  return `${m}m ${pad2(sec)}s`;
}

/** A duration in a compact unit: "1ms", "250ms", "1s", "1.5s", "2m", "24h". */
export function formatDuration(ms: number): string {
  if (ms === 0) return "0";
  if (ms < 1) return `${Math.round(ms * 1000)}µs`;
  if (ms < 1000) return `${trim(ms)}ms`;
  if (ms < 60_000) return `${trim(ms / 1000)}s`;
  if (ms < 3_600_000) return `${trim(ms / 60_000)}m`;
  return `${trim(ms / 3_600_000)}h`;
}

/** Local wall-clock time of an event, to the millisecond. */
export function formatClock(d: Date): string {
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

function pad2(n: number): string {
  return String(n).padStart(2, "0");
}

function trim(n: number): string {
  return String(Math.round(n * 10) / 10);
}
