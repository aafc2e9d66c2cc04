import { type Clock, sleep } from '../clock.js';
import { ClosedError } from '../errors.js';

/** How {@link retry} repeats an operation. */
export interface RetryOptions {
  /** Waits between attempts on this clock: the backend's injected clock, so tests drive it. */
  clock: Clock;
  /** Whether a failure may be cured by trying again (a lost connection, a busy lock). */
  retryIf(error: unknown): boolean;
  /** Attempts in all, the first included (default: unlimited, bounded by `deadlineMs`). */
  attempts?: number;
  /**
   * Gives up once this many ms of `clock` time have passed since the first attempt (default: no
   * deadline, bounded by `attempts`). The last failure is then thrown, or what `onGiveUp` returns.
   */
  deadlineMs?: number;
  /** The wait before retry `n` (1 for the first retry), in ms; see {@link backoff}. */
  delayMs(retry: number): number;
  /** Stops waiting and throws a ClosedError for `what` once aborted. */
  signal?: AbortSignal;
  /** Names what is retried in the ClosedError thrown when `signal` aborts. */
  what?: string;
  /** Replaces the error thrown when retries run out (attempts or deadline), e.g. to say how long it waited. */
  onGiveUp?(error: unknown, elapsedMs: number, attempts: number): unknown;
}

/**
 * Runs `operation` until it succeeds, fails with an error `retryIf` refuses, or the attempts or the
 * deadline run out; waits `delayMs(n)` of `clock` time between attempts. At least one of `attempts` and
 * `deadlineMs` must be set.
 */
export async function retry<T>(
  operation: (attempt: number) => Promise<T> | T,
  options: RetryOptions,
): Promise<T> {
  const { clock } = options;
  if (options.attempts === undefined && options.deadlineMs === undefined)
    throw new TypeError('retry() needs attempts or deadlineMs');
  const started = clock.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await operation(attempt);
    } catch (error) {
      if (!options.retryIf(error)) throw error;
      const elapsed = clock.now() - started;
      const wait = Math.max(0, options.delayMs(attempt));
      const outOfAttempts = options.attempts !== undefined && attempt >= options.attempts;
      const outOfTime = options.deadlineMs !== undefined && elapsed >= options.deadlineMs;
      if (outOfAttempts || outOfTime)
        throw options.onGiveUp ? options.onGiveUp(error, elapsed, attempt) : error;
      const slept = await sleep(clock, wait, options.signal);
      if (!slept) throw new ClosedError(options.what ?? 'the retried operation');
    }
  }
}

/**
 * Exponential backoff for {@link RetryOptions.delayMs}: `initialMs × factor^(n−1)`, capped at `maxMs`, with
 * up to `jitter` (a fraction, default 0) taken off at random so that many clients do not retry in step.
 */
export function backoff(options: {
  initialMs: number;
  factor?: number;
  maxMs?: number;
  jitter?: number;
}): (retry: number) => number {
  const factor = options.factor ?? 2;
  const max = options.maxMs ?? Number.POSITIVE_INFINITY;
  const jitter = Math.min(1, Math.max(0, options.jitter ?? 0));
  return (n) => {
    const base = Math.min(max, options.initialMs * factor ** Math.max(0, n - 1));
    return base - base * jitter * Math.random();
  };
}
