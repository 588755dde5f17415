/**
 * A scheduled job that runs on one process at a time
 * (docs/recipes/scheduled-jobs.md): skip when held, a lease longer than the
 * run's deadline, the watchdog on, the fencing token handed to the job.
 * Go's Client.RunScheduled and Python's run_scheduled are the same helper.
 */

import { acquireLease } from "./acquire.js";
import { checkPositive, checkTtl, formatDuration, type Duration } from "./duration.js";
import { DeadlineExceededError, InvalidArgumentError } from "./errors.js";
import { Guard } from "./guard.js";
import type { RunResult } from "./lock-builder.js";
import type { Session } from "./session.js";

/** One run of a scheduled job: what client.runScheduled takes. */
export interface ScheduledJob<T> {
  /** The lock that makes the job run once per tick across processes. */
  key: string;
  /** The run's deadline: `run`'s signal aborts when it passes. */
  maxRuntime: Duration;
  /** The lease length (default 1.5 × maxRuntime); must be longer than maxRuntime, so that a run within its deadline outlasts any renewal trouble. */
  ttl?: Duration;
  /** Label shown to others while the job runs (default: the client's holder). */
  holder?: string;
  /** Aborts the run from outside (a shutdown): `run`'s signal aborts with its reason. */
  signal?: AbortSignal;
  /**
   * The job. Its signal aborts at maxRuntime (with a DeadlineExceededError),
   * when the lease is lost (with the LeaseLostError) or when `signal` aborts;
   * stop then. Fence every write with fencingToken.
   */
  run: (signal: AbortSignal, fencingToken: bigint) => Promise<T> | T;
}

/**
 * @internal use Client.runScheduled.
 *
 * Runs job.run if job.key is free, after one attempt: held by another
 * process, the answer is `{ ran: false }` and run is not called. Else run
 * goes under the lease and it is released after it: `{ ran: true, value }`.
 * A lease lost during the run rejects with the LeaseLostError; when run
 * threw as well (and not with that loss), with an AggregateError of both.
 */
export async function runScheduled<T>(session: Session, job: ScheduledJob<T>): Promise<RunResult<T>> {
  const maxRuntimeMs = checkPositive("maxRuntime", job.maxRuntime);
  const ttlMs = checkTtl(job.ttl ?? maxRuntimeMs * 1.5);
  if (ttlMs <= maxRuntimeMs) {
    throw new InvalidArgumentError(
      `holdfast: ttl: ${formatDuration(ttlMs)} must be longer than maxRuntime ${formatDuration(maxRuntimeMs)} (a run within its deadline must outlast its lease's renewals)`,
    );
  }
  job.signal?.throwIfAborted();
  const got = await acquireLease(session, [job.key], { ttl: ttlMs, ...(job.holder === undefined ? {} : { holder: job.holder }) }, "try");
  if (!(got instanceof Guard)) return { ran: false };
  const guard = got;

  const deadline = new AbortController();
  const timer = setTimeout(() => {
    deadline.abort(new DeadlineExceededError(`holdfast: scheduled job ${JSON.stringify(job.key)}: maxRuntime ${formatDuration(maxRuntimeMs)} passed`));
  }, maxRuntimeMs);
  const signal = AbortSignal.any([guard.signal, deadline.signal, ...(job.signal ? [job.signal] : [])]);
  let value: T;
  try {
    value = await job.run(signal, guard.fencingToken());
  } catch (runError) {
    clearTimeout(timer);
    const releaseError = await guard.unlock().then(
      () => undefined,
      (e: unknown) => e,
    );
    if (releaseError === undefined || releaseError === runError) throw runError;
    throw new AggregateError([runError, releaseError], `holdfast: scheduled job ${JSON.stringify(job.key)} failed, and its lease did not hold`, {
      cause: runError,
    });
  }
  clearTimeout(timer);
  // A lease lost under run rejects here (LeaseLostError): never a quiet success.
  await guard.unlock();
  return { ran: true, value };
}
