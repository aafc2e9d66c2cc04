import { InvalidArgumentError } from '../errors.js';
import { MAX_INSTANT_MS, MIN_INSTANT_MS, occurrencesOf } from './cron-spec.js';
import { checkEpochMs, instantOf } from './instant.js';
import type { Spec, SpecDescription } from './spec.js';

/** Longest interval accepted: 100 years of milliseconds. */
export const MAX_INTERVAL_MS = 100 * 366 * 86_400_000;

/** The JSON-safe description of an interval spec. */
export interface IntervalSpecDescription extends SpecDescription {
  kind: 'interval';
  timeZone: 'UTC';
  everyMs: number;
  /** ISO instant the grid is aligned to (the epoch unless `intervalFrom` gave one). */
  anchor: string;
}

/**
 * Every `everyMs` milliseconds of elapsed time, on a grid aligned to the Unix epoch: `interval(60_000)`
 * fires at every whole UTC minute. Intervals measure elapsed time and ignore DST and zones.
 *
 * @throws {InvalidArgumentError} naming `everyMs` unless it is a whole number from 1 to 100 years of ms.
 */
export function interval(everyMs: number): IntervalSpec {
  return new IntervalSpec(checkEvery(everyMs), 0, false);
}

/**
 * Every `everyMs` milliseconds on a grid through `anchor`: the instants `anchor + k * everyMs` for every
 * whole `k`, before and after the anchor alike (the anchor sets the phase, not a start).
 *
 * @example intervalFrom(3_600_000, new Date('2026-01-01T00:15:00Z')) // every hour at :15 UTC
 * @throws {InvalidArgumentError} naming `everyMs` or `anchor`.
 */
export function intervalFrom(everyMs: number, anchor: Date): IntervalSpec {
  const every = checkEvery(everyMs);
  const at = instantOf('anchor', anchor);
  if (at < MIN_INSTANT_MS || at > MAX_INSTANT_MS)
    throw new InvalidArgumentError('anchor', anchor, 'must be within the years 1 to 9999');
  return new IntervalSpec(every, at, true);
}

function checkEvery(everyMs: unknown): number {
  if (typeof everyMs !== 'number' || !Number.isInteger(everyMs) || everyMs < 1)
    throw new InvalidArgumentError('everyMs', everyMs, 'must be a whole number of milliseconds, at least 1');
  if (everyMs > MAX_INTERVAL_MS)
    throw new InvalidArgumentError('everyMs', everyMs, `must be at most ${MAX_INTERVAL_MS} (100 years)`);
  return everyMs;
}

const UNITS: Array<[string, number]> = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
  ['ms', 1],
];

/** `90_000` → `1m30s`. */
export function formatDuration(ms: number): string {
  let rest = ms;
  let text = '';
  for (const [unit, size] of UNITS) {
    if (rest >= size) {
      text += `${Math.floor(rest / size)}${unit}`;
      rest %= size;
    }
  }
  return text === '' ? '0ms' : text;
}

/** A fixed interval of elapsed time. Immutable. */
export class IntervalSpec implements Spec {
  readonly timeZone = 'UTC';
  readonly everyMs: number;
  readonly anchorMs: number;
  readonly #expression: string;

  /** Use {@link interval} or {@link intervalFrom}. */
  constructor(everyMs: number, anchorMs: number, anchored: boolean) {
    this.everyMs = everyMs;
    this.anchorMs = anchorMs;
    this.#expression = anchored
      ? `every ${formatDuration(everyMs)} from ${new Date(anchorMs).toISOString()}`
      : `every ${formatDuration(everyMs)}`;
    Object.freeze(this);
  }

  next(after: Date): Date | undefined {
    const ms = this.nextMs(instantOf('after', after));
    return Number.isNaN(ms) ? undefined : new Date(ms);
  }

  prev(before: Date): Date | undefined {
    const ms = this.prevMs(instantOf('before', before));
    return Number.isNaN(ms) ? undefined : new Date(ms);
  }

  /**
   * {@link next} on epoch milliseconds; NaN when there is none. As with `CronSpec.nextMs`, a NaN
   * argument throws rather than answering "none".
   *
   * @throws {InvalidArgumentError} naming `afterMs` when it is not a number or is NaN.
   */
  nextMs(afterMs: number): number {
    checkEpochMs('afterMs', afterMs);
    const steps = Math.floor((Math.max(afterMs, MIN_INSTANT_MS - 1) - this.anchorMs) / this.everyMs) + 1;
    const at = this.anchorMs + steps * this.everyMs;
    return at <= MAX_INSTANT_MS ? at : Number.NaN;
  }

  /**
   * {@link prev} on epoch milliseconds; NaN when there is none.
   *
   * @throws {InvalidArgumentError} naming `beforeMs` when it is not a number or is NaN.
   */
  prevMs(beforeMs: number): number {
    checkEpochMs('beforeMs', beforeMs);
    const steps = Math.ceil((Math.min(beforeMs, MAX_INSTANT_MS + 1) - this.anchorMs) / this.everyMs) - 1;
    const at = this.anchorMs + steps * this.everyMs;
    return at >= MIN_INSTANT_MS ? at : Number.NaN;
  }

  occurrences(from: Date, to: Date): Iterable<Date> {
    const start = instantOf('from', from);
    const end = instantOf('to', to);
    return occurrencesOf(this, start, end);
  }

  toString(): string {
    return this.#expression;
  }

  describe(): IntervalSpecDescription {
    return {
      kind: 'interval',
      expression: this.#expression,
      timeZone: 'UTC',
      everyMs: this.everyMs,
      anchor: new Date(this.anchorMs).toISOString(),
    };
  }

  toJSON(): IntervalSpecDescription {
    return this.describe();
  }
}
