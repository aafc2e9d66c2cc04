import { randomBytes } from 'node:crypto';
import { InvalidArgumentError, NotFoundError } from '../errors.js';
import { positiveInteger, validDate } from '../validate.js';
import {
  type CatchUp,
  checkCatchUp,
  dueOf,
  isOneShot,
  occurrenceAfter,
  pausedOccurrences,
  type QueuedDelivery,
  type StoredState,
  specOf,
  stateOf,
} from './recurrence.js';
import type { Schedule } from './types.js';
import type { Work } from './work.js';

/**
 * What operators and applications do to a schedule beside replacing or cancelling it: pause and resume,
 * trigger an extra delivery, skip occurrences, backfill past ones. Each reads the schedule in the
 * transaction and writes it again as a new version, on condition that nobody changed it meanwhile (the
 * transaction is re-run otherwise), so a delivery holding the older version never applies.
 */

/** Most deliveries one schedule keeps queued (triggers, backfills, occurrences caught up on resume). */
export const MAX_QUEUED = 1000;
/** Most occurrences one `backfillSchedule` call queues. */
export const MAX_BACKFILL = 1000;
const MAX_NOTE = 1000;

/** What {@link Transaction.resumeSchedule} did. */
export interface ResumeResult {
  /** False when the schedule was not paused (nothing changed). */
  resumed: boolean;
  /** Occurrences that fell due while paused and run now under the catch-up rule, oldest first. */
  caughtUp: Date[];
  /** Occurrences that fell due while paused and are not run: how many, the first and the last. */
  missed?: { count: number; first: Date; last: Date };
}

// biome-ignore lint/suspicious/noExplicitAny: any adapter's unit
type AnyWork = Work<unknown, any>;

async function current(work: AnyWork, key: string): Promise<Schedule> {
  const schedule = await work.loadSchedule(key);
  if (!schedule)
    throw new NotFoundError(
      `schedule ${JSON.stringify(key)}`,
      `no active schedule under ${JSON.stringify(key)}`,
    );
  return schedule;
}

/** Writes `schedule` again with `state` (a new version, due as the state says), if nobody changed it since. */
function rewrite(work: AnyWork, schedule: Schedule, state: StoredState | undefined, at = schedule.at): void {
  const kept =
    state && isOneShot(state) && !state.paused && !state.queue?.length && !state.ended ? undefined : state;
  const dueAt = dueOf(kept, at) ?? at;
  work.put({
    op: 'put',
    key: schedule.key,
    at,
    ...(dueAt.getTime() !== at.getTime() ? { dueAt } : {}),
    message: schedule.message,
    ...(kept ? { recurrence: kept } : {}),
    // A schedule this transaction created itself has no version yet (buffered stores assign it at commit).
    ...(schedule.version > 0 ? { ifVersion: schedule.version } : {}),
  });
}

function editable(schedule: Schedule): StoredState {
  return structuredClone(stateOf(schedule)) ?? { v: 1, once: true };
}

function enqueue(state: StoredState, added: QueuedDelivery[], field: string): void {
  const queue = [...(state.queue ?? []), ...added].sort((a, b) => a.at - b.at);
  if (queue.length > MAX_QUEUED)
    throw new InvalidArgumentError(
      field,
      added.length,
      `would queue ${queue.length} deliveries on one schedule (at most ${MAX_QUEUED}); wait for some to run`,
    );
  state.queue = queue;
}

export async function pause(work: AnyWork, now: number, key: string, options: unknown): Promise<boolean> {
  const { note } = readOptions(options, ['note']);
  if (note !== undefined && (typeof note !== 'string' || note.length > MAX_NOTE))
    throw new InvalidArgumentError(
      'options.note',
      note,
      `must be a string of at most ${MAX_NOTE} characters`,
    );
  const schedule = await current(work, key);
  if (schedule.paused) return false;
  const state = editable(schedule);
  state.paused = { at: now, ...(note !== undefined ? { note: note as string } : {}) };
  rewrite(work, schedule, state);
  return true;
}

export async function resume(
  work: AnyWork,
  now: number,
  key: string,
  options: unknown,
): Promise<ResumeResult> {
  const { catchUp } = readOptions(options, ['catchUp']);
  const rule = catchUp === undefined ? undefined : checkCatchUp(catchUp, 'options.catchUp');
  const schedule = await current(work, key);
  if (!schedule.paused) return { resumed: false, caughtUp: [] };
  const state = editable(schedule);
  delete state.paused;
  if (isOneShot(state) || state.ended || schedule.at.getTime() > now) {
    rewrite(work, schedule, state);
    return { resumed: true, caughtUp: [] };
  }
  const fell = pausedOccurrences(state, schedule.at, now, rule ?? state.catchUp);
  enqueue(
    state,
    fell.run.map((at) => ({ at: at.getTime(), kind: 'occurrence' })),
    'options.catchUp',
  );
  const next = occurrenceAfter(state, now);
  if (next === undefined) state.ended = true;
  rewrite(work, schedule, state, next ?? schedule.at);
  return { resumed: true, caughtUp: fell.run, ...(fell.missed ? { missed: fell.missed } : {}) };
}

export async function trigger(work: AnyWork, now: number, key: string, options: unknown): Promise<string> {
  const { at } = readOptions(options, ['at']);
  const when = at === undefined ? now : validDate('options.at', at).getTime();
  const schedule = await current(work, key);
  const state = editable(schedule);
  const id = randomBytes(16).toString('hex');
  enqueue(state, [{ at: when, kind: 'trigger', id }], 'key');
  rewrite(work, schedule, state);
  return id;
}

export async function skip(work: AnyWork, key: string, count: unknown): Promise<number> {
  const n = positiveInteger('n', count);
  const schedule = await current(work, key);
  if (!schedule.recurrence)
    throw new InvalidArgumentError('key', key, 'names a one-shot schedule: it has no occurrences to skip');
  const state = editable(schedule);
  if (isOneShot(state)) throw new InvalidArgumentError('key', key, 'names a one-shot schedule');
  state.skip = (state.skip ?? 0) + n;
  rewrite(work, schedule, state);
  return state.skip;
}

export async function backfill(work: AnyWork, key: string, range: unknown): Promise<Date[]> {
  const { from, to } = readOptions(range, ['from', 'to'], 'range');
  const start = validDate('range.from', from).getTime();
  const end = validDate('range.to', to).getTime();
  if (start >= end) throw new InvalidArgumentError('range.to', to, 'must be after range.from');
  const schedule = await current(work, key);
  const state = editable(schedule);
  if (isOneShot(state))
    throw new InvalidArgumentError(
      'key',
      key,
      'names a one-shot schedule: it has no occurrences to backfill',
    );
  const spec = specOf(state);
  const instants: Date[] = [];
  for (
    let cursor = spec.next(new Date(start - 1));
    cursor && cursor.getTime() < end;
    cursor = spec.next(cursor)
  ) {
    if (instants.length === MAX_BACKFILL)
      throw new InvalidArgumentError(
        'range',
        { from, to },
        `holds more than ${MAX_BACKFILL} occurrences; backfill it in smaller ranges`,
      );
    instants.push(cursor);
  }
  enqueue(
    state,
    instants.map((at) => ({ at: at.getTime(), kind: 'backfill' })),
    'range',
  );
  rewrite(work, schedule, state);
  return instants;
}

function readOptions(value: unknown, known: string[], field = 'options'): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new InvalidArgumentError(field, value, `must be an object { ${known.join(', ')} }`);
  for (const name of Object.keys(value))
    if (!known.includes(name))
      throw new InvalidArgumentError(
        `${field}.${name}`,
        name,
        `is not an option (known: ${known.join(', ')})`,
      );
  return value as Record<string, unknown>;
}

export type { CatchUp };
