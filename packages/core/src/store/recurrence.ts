import { createHash } from 'node:crypto';
import { InvalidArgumentError } from '../errors.js';
import { CronSpec, parseCron } from '../time/cron-spec.js';
import { IntervalSpec, intervalFrom } from '../time/interval.js';
import type { DstPolicy, Spec } from '../time/spec.js';
import { duration, positiveInteger } from '../validate.js';

/**
 * What happens to occurrences that were missed (the dispatcher was down, or the backlog was long): an
 * occurrence is *missed* when it is delivered more than `grace` after its instant, on its first attempt.
 * - `'latest'` (default): of the missed occurrences, only the most recent runs, then the recurrence goes on.
 * - `'skip'`: missed occurrences do not run; the recurrence goes on from the next one not missed.
 * - `{ max: n }`: each missed occurrence runs, oldest first, but only the `n` most recent of them.
 * Retries of a failed occurrence are never missed: an occurrence that started runs until it succeeds or
 * is dead-lettered.
 */
export type CatchUp = 'latest' | 'skip' | { max: number };

/** Options of {@link recurring}. */
export interface RecurrenceOptions {
  /** No occurrence before this instant (default: when the schedule is written). */
  startAt?: Date;
  /** No occurrence after this instant (inclusive bound). */
  endAt?: Date;
  /** At most this many occurrences run (delivered or dead-lettered; skipped ones do not count). */
  maxOccurrences?: number;
  /** What to do with missed occurrences (default `'latest'`). */
  catchUp?: CatchUp;
  /** How late an occurrence may be delivered before it counts as missed, in ms (default 60,000). */
  grace?: number;
}

/** A recurring schedule's timing, made by {@link recurring}; pass it to `tx.schedule` instead of a Date. */
export interface Recurrence {
  readonly spec: Spec;
  readonly startAt: Date | undefined;
  readonly endAt: Date | undefined;
  readonly maxOccurrences: number | undefined;
  readonly catchUp: CatchUp;
  readonly grace: number;
}

/** How a recurring schedule's spec is stored: enough to rebuild it exactly. */
export type StoredSpec =
  | { kind: 'cron'; expression: string; timeZone: string; dst: DstPolicy }
  | { kind: 'interval'; everyMs: number; anchor: number };

/**
 * The stored form of a recurring schedule (`Schedule.recurrence`), version 1: JSON, written by every
 * backend as it is given and read back by any later version of duetime. Instants are epoch milliseconds.
 */
export interface StoredRecurrence {
  v: 1;
  spec: StoredSpec;
  startAt?: number;
  endAt?: number;
  maxOccurrences?: number;
  catchUp: CatchUp;
  grace: number;
  /** Occurrences run so far (delivered or dead-lettered). */
  count: number;
}

const RECURRENCE = Symbol.for('duetime.recurrence');
const DEFAULT_GRACE = 60_000;
/** The most occurrences a catch-up decision looks at (beyond it, only the most recent count). */
const SCAN_LIMIT = 100_000;

/**
 * A recurrence for `tx.schedule(key, recurrence, message)`: a schedule that is delivered at every
 * occurrence of `spec` (a cron spec with its zone and DST policy from `parseCron`, or an interval from
 * `interval`/`intervalFrom`), within the bounds given.
 *
 * @example recurring(parseCron('0 9 * * MON', 'America/New_York'), { catchUp: 'latest' })
 * @throws {InvalidArgumentError} naming the option for bad input, at the call.
 */
export function recurring(spec: Spec, options: RecurrenceOptions = {}): Recurrence {
  storedSpec(spec);
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new InvalidArgumentError('recurrence options', options, 'must be an object');
  const known = new Set(['startAt', 'endAt', 'maxOccurrences', 'catchUp', 'grace']);
  for (const name of Object.keys(options))
    if (!known.has(name)) throw new InvalidArgumentError(`recurrence.${name}`, name, 'is not an option');
  const startAt = optionalDate('recurrence.startAt', options.startAt);
  const endAt = optionalDate('recurrence.endAt', options.endAt);
  if (startAt && endAt && endAt.getTime() < startAt.getTime())
    throw new InvalidArgumentError('recurrence.endAt', endAt, 'must not be before startAt');
  const maxOccurrences =
    options.maxOccurrences === undefined
      ? undefined
      : positiveInteger('recurrence.maxOccurrences', options.maxOccurrences);
  const recurrence = {
    spec,
    startAt,
    endAt,
    maxOccurrences,
    catchUp: catchUpOf(options.catchUp ?? 'latest', 'recurrence.catchUp'),
    grace: duration('recurrence.grace', options.grace ?? DEFAULT_GRACE, { allowZero: true }),
    [RECURRENCE]: true,
  };
  return Object.freeze(recurrence);
}

/** Whether `value` came from {@link recurring}. */
export function isRecurrence(value: unknown): value is Recurrence {
  return (
    typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[RECURRENCE] === true
  );
}

/** The stored form of a new recurrence, and its first occurrence at or after `now` (and `startAt`). */
export function storeRecurrence(recurrence: Recurrence, now: number): { at: Date; stored: StoredRecurrence } {
  const stored: StoredRecurrence = {
    v: 1,
    spec: storedSpec(recurrence.spec),
    catchUp: recurrence.catchUp,
    grace: recurrence.grace,
    count: 0,
  };
  if (recurrence.startAt) stored.startAt = recurrence.startAt.getTime();
  if (recurrence.endAt) stored.endAt = recurrence.endAt.getTime();
  if (recurrence.maxOccurrences !== undefined) stored.maxOccurrences = recurrence.maxOccurrences;
  const from = Math.max(now, stored.startAt ?? now);
  const at = occurrenceFrom(stored, recurrence.spec, from);
  if (at === undefined)
    throw new InvalidArgumentError(
      'recurrence',
      recurrence.spec.toString(),
      stored.endAt === undefined
        ? 'has no occurrence from now on'
        : `has no occurrence between ${new Date(from).toISOString()} and ${new Date(stored.endAt).toISOString()}`,
    );
  return { at, stored };
}

/** The first occurrence at or after `from`, within the bounds (undefined when there is none). */
function occurrenceFrom(stored: StoredRecurrence, spec: Spec, from: number): Date | undefined {
  if (stored.maxOccurrences !== undefined && stored.count >= stored.maxOccurrences) return undefined;
  const next = spec.next(new Date(Math.max(from, stored.startAt ?? from) - 1));
  if (next === undefined || (stored.endAt !== undefined && next.getTime() > stored.endAt)) return undefined;
  return next;
}

/** What to do with a recurring schedule claimed for delivery at `now`. */
export interface OccurrencePlan {
  /** The occurrence to run now, or undefined to run none (missed and skipped). */
  run: Date | undefined;
  /** With nothing to run: the occurrence to arm instead (undefined: the recurrence has ended). */
  next: Date | undefined;
}

/**
 * Applies the catch-up rule to a claimed occurrence `at` (first attempt only; a retry always runs `at`).
 */
export function planOccurrence(
  stored: StoredRecurrence,
  at: Date,
  attempts: number,
  now: number,
): OccurrencePlan {
  if (attempts > 0 || now - at.getTime() <= stored.grace) return { run: at, next: undefined };
  const spec = specOf(stored);
  const due: number[] = [];
  let cursor: Date | undefined = at;
  while (cursor && cursor.getTime() <= now && due.length < SCAN_LIMIT) {
    if (stored.endAt !== undefined && cursor.getTime() > stored.endAt) break;
    due.push(cursor.getTime());
    cursor = spec.next(cursor);
  }
  if (due.length >= SCAN_LIMIT) {
    // Too many to walk: only the most recent ones can matter; restart the walk from just before now.
    const recent = spec.prev(new Date(now + 1));
    due.length = 0;
    if (recent) due.push(recent.getTime());
  }
  const fresh = due.filter((t) => now - t <= stored.grace);
  const rule = stored.catchUp;
  let run: number | undefined;
  if (rule === 'skip') run = fresh[0];
  else if (rule === 'latest') run = due.at(-1);
  else {
    const missed = due.filter((t) => now - t > stored.grace);
    run = missed.length > rule.max ? missed[missed.length - rule.max] : (missed[0] ?? fresh[0]);
  }
  if (run !== undefined) return { run: new Date(run), next: undefined };
  return { run: undefined, next: occurrenceFrom(stored, spec, now + 1) };
}

/**
 * The occurrence after `ran`, once it has run (`counted` true: delivered or dead-lettered), or after a
 * skip: undefined when the recurrence has ended (endAt, maxOccurrences). Also returns the stored form with
 * its count updated.
 */
export function followingOccurrence(
  stored: StoredRecurrence,
  ran: Date,
  counted: boolean,
): { at: Date | undefined; stored: StoredRecurrence } {
  const next: StoredRecurrence = { ...stored, count: stored.count + (counted ? 1 : 0) };
  return { at: occurrenceFrom(next, specOf(stored), ran.getTime() + 1), stored: next };
}

/**
 * The occurrences of a recurring schedule from its pending one, `at`, on: at most `count`, fewer when the
 * recurrence ends first (`endAt`, `maxOccurrences`), as delivering each would arm them. For tools that
 * show what is coming (`duetime schedules show`, the dashboard). A stored form this version cannot
 * rebuild gives the pending occurrence alone.
 */
export function upcomingOccurrences(stored: StoredRecurrence, at: Date, count: number): Date[] {
  const out: Date[] = [];
  if (count < 1) return out;
  out.push(new Date(at.getTime()));
  let current = stored;
  let ran = at;
  try {
    while (out.length < count) {
      const next = followingOccurrence(current, ran, true);
      if (!next.at) break;
      out.push(next.at);
      current = next.stored;
      ran = next.at;
    }
  } catch {
    // An unreadable spec: the pending occurrence is still known.
  }
  return out;
}

/** A stored recurrence in a line: `cron 0 9 * * MON America/New_York` or `every 60000 ms`. */
export function describeStoredRecurrence(stored: StoredRecurrence): string {
  const spec = stored.spec;
  if (spec.kind === 'cron') {
    const dst =
      spec.dst.gap === 'skip' && spec.dst.overlap === 'both'
        ? ''
        : ` (dst ${spec.dst.gap},${spec.dst.overlap})`;
    return `cron ${spec.expression} ${spec.timeZone}${dst}`;
  }
  return `every ${spec.everyMs} ms from ${new Date(spec.anchor).toISOString()}`;
}

/**
 * The occurrence id of the recurring schedule `key` at `instant`: 32 hex characters of SHA-256. The same
 * on every process, whatever the schedule's version: use it as an idempotency key for the occurrence.
 */
export function recurringOccurrenceId(key: string, instant: Date): string {
  return createHash('sha256')
    .update(JSON.stringify(['duetime/recurring', key, instant.getTime()]))
    .digest('hex')
    .slice(0, 32);
}

/** Rebuilds the spec of a stored recurrence. */
export function specOf(stored: StoredRecurrence): Spec {
  const spec = stored.spec;
  if (spec.kind === 'cron') return parseCron(spec.expression, spec.timeZone, { dst: spec.dst });
  return intervalFrom(spec.everyMs, new Date(spec.anchor));
}

/**
 * Checks a stored recurrence read back from a backend (written by this or an older version) and returns
 * it; throws for a form this version does not know (a newer version wrote it).
 */
export function readRecurrence(value: unknown, where: string): StoredRecurrence {
  const r = value as StoredRecurrence;
  if (typeof r !== 'object' || r === null || r.v !== 1 || typeof r.spec !== 'object' || r.spec === null)
    throw new InvalidArgumentError(where, value, 'is not a recurrence this version of duetime can read');
  return r;
}

function storedSpec(spec: Spec): StoredSpec {
  if (spec instanceof CronSpec) {
    const d = spec.describe();
    return { kind: 'cron', expression: d.expression, timeZone: d.timeZone, dst: { ...d.dst } };
  }
  if (spec instanceof IntervalSpec) {
    const d = spec.describe();
    return { kind: 'interval', everyMs: d.everyMs, anchor: Date.parse(d.anchor) };
  }
  throw new InvalidArgumentError(
    'recurrence.spec',
    spec,
    'must come from parseCron(), interval() or intervalFrom() (only those can be stored)',
  );
}

function optionalDate(field: string, value: unknown): Date | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof Date) || Number.isNaN(value.getTime()))
    throw new InvalidArgumentError(field, value, 'must be a valid Date');
  return new Date(value.getTime());
}

function catchUpOf(value: unknown, field: string): CatchUp {
  if (value === 'latest' || value === 'skip') return value;
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const { max, ...rest } = value as { max?: unknown };
    if (Object.keys(rest).length > 0) throw new InvalidArgumentError(field, value, 'takes only { max }');
    return Object.freeze({ max: positiveInteger(`${field}.max`, max) });
  }
  throw new InvalidArgumentError(field, value, "must be 'latest', 'skip' or { max: n }");
}
