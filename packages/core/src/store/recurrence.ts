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

/** A delivery queued beside a schedule's own (see {@link ScheduleControl.queue}). */
export interface QueuedDelivery {
  /** When it is due (epoch ms). */
  at: number;
  /**
   * `occurrence`: an occurrence of the spec caught up on resume (counts as a run); `backfill`: an
   * occurrence of the spec delivered again on request (not counted); `trigger`: an extra delivery of the
   * message with an occurrence id of its own, `id` (not counted).
   */
  kind: 'occurrence' | 'backfill' | 'trigger';
  /** A trigger's occurrence id. */
  id?: string;
}

/**
 * What operators and applications did to a schedule beside its deadline (`tx.pauseSchedule`,
 * `tx.triggerSchedule`, `tx.skipNext`, `tx.backfillSchedule`), kept in its stored state.
 */
export interface ScheduleControl {
  /** Present while paused: since when (epoch ms) and why. A paused schedule's own deliveries wait. */
  paused?: { at: number; note?: string };
  /** Extra deliveries due, oldest first: delivered even while paused, without moving the grid. */
  queue?: QueuedDelivery[];
  /** How many of the next occurrences of the spec to skip (recurring schedules). */
  skip?: number;
  /** Set when the schedule's own deliveries are over (a recurrence ended) while queued ones remain. */
  ended?: true;
}

/**
 * The stored form of a recurring schedule (`Schedule.recurrence`), version 1: JSON, written by every
 * backend as it is given and read back by any later version of duetime. Instants are epoch milliseconds.
 */
export interface StoredRecurrence extends ScheduleControl {
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

/** A one-shot schedule's stored state, kept only while it has operator state (a pause, a trigger). */
export interface StoredOneShot extends ScheduleControl {
  v: 1;
  once: true;
}

/** What a backend keeps with a schedule beside its deadline and message (JSON, opaque to backends). */
export type StoredState = StoredRecurrence | StoredOneShot;

/** Whether a stored state is a one-shot schedule's. */
export function isOneShot(state: StoredState): state is StoredOneShot {
  return (state as StoredOneShot).once === true;
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
  /**
   * The occurrences the catch-up rule does not run (undefined when none): how many (at least, past
   * 100,000 of them), the first and the last.
   */
  missed?: { count: number; first: Date; last: Date };
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
  const scanned = due.length >= SCAN_LIMIT;
  if (scanned) {
    // Too many to walk: only the most recent ones can matter; restart the walk from just before now.
    const recent = spec.prev(new Date(now + 1));
    due.length = 0;
    if (recent) due.push(recent.getTime());
  }
  const run = chooseRun(due, stored.catchUp, stored.grace, now);
  const notRun = due.filter((t) => run === undefined || t < run);
  const plan: OccurrencePlan =
    run !== undefined
      ? { run: new Date(run), next: undefined }
      : { run: undefined, next: occurrenceFrom(stored, spec, now + 1) };
  const first = scanned ? at.getTime() : notRun[0];
  const last = notRun.at(-1);
  if (first !== undefined && last !== undefined)
    plan.missed = {
      count: scanned ? SCAN_LIMIT + notRun.length : notRun.length,
      first: new Date(first),
      last: new Date(last),
    };
  return plan;
}

/** Which of the due occurrences (oldest first) a catch-up rule runs first; the older ones are not run. */
function chooseRun(due: readonly number[], rule: CatchUp, grace: number, now: number): number | undefined {
  const fresh = due.filter((t) => now - t <= grace);
  if (rule === 'skip') return fresh[0];
  if (rule === 'latest') return due.at(-1);
  const missed = due.filter((t) => now - t > grace);
  return missed.length > rule.max ? missed[missed.length - rule.max] : (missed[0] ?? fresh[0]);
}

/**
 * The occurrences of a paused recurrence that fell due while it was paused (from `at` through `now`),
 * sorted into those its catch-up rule (`rule`) runs, oldest first, and those it does not. At most 1,000
 * are run; a longer walk counts the rest as not run.
 */
export function pausedOccurrences(
  stored: StoredRecurrence,
  at: Date,
  now: number,
  rule: CatchUp,
): { run: Date[]; missed?: { count: number; first: Date; last: Date } } {
  const spec = specOf(stored);
  const due: number[] = [];
  let skipped = 0;
  let firstSkipped: number | undefined;
  let cursor: Date | undefined = at;
  while (cursor && cursor.getTime() <= now) {
    if (stored.endAt !== undefined && cursor.getTime() > stored.endAt) break;
    due.push(cursor.getTime());
    if (due.length > SCAN_LIMIT) {
      firstSkipped ??= due[0];
      skipped++;
      due.shift();
    }
    cursor = spec.next(cursor);
  }
  const first = chooseRun(due, rule, stored.grace, now);
  let run = first === undefined ? [] : due.filter((t) => t >= first);
  if (rule === 'latest') run = run.slice(-1);
  if (run.length > 1000) run = run.slice(-1000);
  const notRun = due.filter((t) => !run.includes(t));
  const count = skipped + notRun.length;
  const firstMissed = firstSkipped ?? notRun[0];
  const lastMissed = notRun.at(-1) ?? firstSkipped;
  return {
    run: run.map((t) => new Date(t)),
    ...(count > 0 && firstMissed !== undefined && lastMissed !== undefined
      ? { missed: { count, first: new Date(firstMissed), last: new Date(lastMissed) } }
      : {}),
  };
}

/** The next occurrence of a stored recurrence strictly after `after` (within its bounds), if any. */
export function occurrenceAfter(stored: StoredRecurrence, after: number): Date | undefined {
  return occurrenceFrom(stored, specOf(stored), after + 1);
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

/** `dueAt` of a paused schedule (9999-12-31T23:59:59.999Z): never due, on every backend. */
export const PAUSED_DUE = 253_402_300_799_999;

/** When a schedule with `state` is next due: its queue's head or its own deadline, whichever is first. */
export function dueOf(state: StoredState | undefined, at: Date): Date | undefined {
  const head = state?.queue?.[0]?.at;
  const own = state?.paused || state?.ended ? undefined : at.getTime();
  const due = head === undefined ? own : own === undefined ? head : Math.min(head, own);
  if (due !== undefined) return new Date(due);
  return state?.paused && !state.ended ? new Date(PAUSED_DUE) : undefined;
}

/** Sets `schedule`'s `recurrence`, `paused` and `queue` from its stored state (none: a plain one-shot). */
export function withState<
  S extends { recurrence?: StoredRecurrence; paused?: { at: Date; note?: string }; queue?: QueuedDelivery[] },
>(schedule: S, state: StoredState | undefined): S {
  if (!state) return schedule;
  if (!isOneShot(state)) schedule.recurrence = state;
  if (state.paused)
    schedule.paused = {
      at: new Date(state.paused.at),
      ...(state.paused.note !== undefined ? { note: state.paused.note } : {}),
    };
  if (state.queue && state.queue.length > 0) schedule.queue = state.queue.map((q) => ({ ...q }));
  return schedule;
}

/** The stored state of a schedule as read (the inverse of {@link withState}); none for a plain one-shot. */
export function stateOf(schedule: {
  recurrence?: StoredRecurrence;
  paused?: { at: Date; note?: string };
  queue?: QueuedDelivery[];
}): StoredState | undefined {
  if (schedule.recurrence) return schedule.recurrence;
  if (!schedule.paused && !schedule.queue?.length) return undefined;
  const state: StoredOneShot = { v: 1, once: true };
  if (schedule.paused)
    state.paused = {
      at: schedule.paused.at.getTime(),
      ...(schedule.paused.note !== undefined ? { note: schedule.paused.note } : {}),
    };
  if (schedule.queue?.length) state.queue = schedule.queue.map((q) => ({ ...q }));
  return state;
}

/** Like {@link readRecurrence}, for any stored state (a recurrence, or a one-shot schedule's). */
export function readState(value: unknown, where: string): StoredState {
  const r = value as StoredOneShot;
  if (typeof r === 'object' && r !== null && r.v === 1 && r.once === true) return r;
  return readRecurrence(value, where);
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

/** Checks a catch-up rule (`'latest'`, `'skip'` or `{ max }`), naming `field` in errors. */
export function checkCatchUp(value: unknown, field: string): CatchUp {
  return catchUpOf(value, field);
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
