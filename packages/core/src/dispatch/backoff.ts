import { InvalidArgumentError } from '../errors.js';
import { duration } from '../validate.js';

export interface BackoffOptions {
  /** The delay after the first failure, in ms (default 1,000). */
  base?: number;
  /** How much each further failure multiplies it (default 2). */
  factor?: number;
  /** The longest delay, in ms (default 3,600,000: one hour). */
  max?: number;
  /**
   * How much of each delay is random, from 0 (none) to 1 (anywhere between 0 and the delay; default 0.2),
   * so that messages that failed together do not all come back at the same instant.
   */
  jitter?: number;
}

/**
 * Exponential backoff with jitter and a cap, as a `retryDelay` for the {@link Dispatcher}:
 * `base × factor^(attempt − 1)`, at most `max`, minus a random share of up to `jitter` of it. The
 * default `retryDelay` is `exponentialBackoff()`: 1 s, 2 s, 4 s, … up to an hour.
 */
export function exponentialBackoff(options: BackoffOptions = {}): (attempt: number) => number {
  const base = duration('backoff.base', options.base ?? 1000);
  const max = duration('backoff.max', options.max ?? 3_600_000);
  if (max < base)
    throw new InvalidArgumentError('backoff.max', options.max, `must be at least base (${base} ms)`);
  const factor = options.factor ?? 2;
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1 || factor > 100)
    throw new InvalidArgumentError('backoff.factor', factor, 'must be a number from 1 to 100');
  const jitter = options.jitter ?? 0.2;
  if (typeof jitter !== 'number' || !(jitter >= 0 && jitter <= 1))
    throw new InvalidArgumentError('backoff.jitter', jitter, 'must be a number from 0 to 1');
  return (attempt) => {
    const exponent = Math.max(0, Math.min(attempt - 1, 1000));
    const delay = Math.min(max, base * factor ** exponent);
    return Math.round(delay * (1 - jitter * Math.random()));
  };
}
