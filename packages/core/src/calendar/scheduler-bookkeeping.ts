import type { Logger } from '../logger.js';
import type { RunState } from '../run-loop.js';
import type { CursorBook, Track } from './decide/cursor-book.js';
import type { Leadership } from './decide/leadership.js';
import { type History, Reason, type ScheduleRecord, State } from './decide/records.js';
import type { Slots } from './decide/slots.js';
import { type SchedulerSnapshot, scheduleSnapshots } from './decide/snapshot.js';
import type { ResolvedConfig } from './declare/config.js';
import type { RunRequest } from './run/run-types.js';

/** The scheduler's bookkeeping beside its loop: cursor reads, the records it keeps of its own, its snapshot. */

const CURSOR_READS_AT_ONCE = 32;

/** Reads the cursors of the `due` tracks not loaded yet, a few at once; returns whether any read failed. */
export async function loadCursors(
  due: readonly Track[],
  cursors: CursorBook,
  logger: Logger,
): Promise<boolean> {
  let readFailed = false;
  const unloaded = due.filter((t) => !t.loaded);
  for (let i = 0; i < unloaded.length; i += CURSOR_READS_AT_ONCE) {
    const batch = unloaded.slice(i, i + CURSOR_READS_AT_ONCE);
    const results = await Promise.allSettled(batch.map((t) => cursors.load(t)));
    results.forEach((result, j) => {
      if (result.status === 'rejected') {
        readFailed = true;
        logger.warn('could not read a schedule cursor; retrying at the next poll', {
          schedule: batch[j]?.declaration.id,
          error: result.reason,
        });
      }
    });
  }
  return readFailed;
}

/** The record of a clock incident (schedule `*`). */
export function clockIncidentRecord(detail: string, at: number): Omit<ScheduleRecord, 'seq'> {
  return {
    schedule: '*',
    occurrence: '',
    intendedAt: new Date(at),
    origin: 'scheduled',
    state: State.Skipped,
    reason: Reason.ClockFailed,
    detail,
    finishedAt: new Date(at),
  };
}

/** The request skipped when a schedule's spec threw. */
export function specFailedRequest(track: Track, at: number): RunRequest {
  return {
    declaration: track.declaration,
    invocation: {
      schedule: track.declaration.id,
      occurrence: '',
      intendedAt: new Date(at),
      origin: 'scheduled',
    },
  };
}

/** What {@link schedulerSnapshot} reads. */
export interface SnapshotSources {
  config: ResolvedConfig;
  state: RunState;
  leadership: Leadership;
  slots: Slots;
  queued: number;
  tracks: Iterable<Track>;
  history: History;
}

/** A scheduler's snapshot. */
export function schedulerSnapshot(s: SnapshotSources): SchedulerSnapshot {
  const epoch = s.leadership.epoch;
  return {
    state: s.state,
    leader: s.leadership.leading,
    ...(epoch ? { epoch: epoch.token } : {}),
    owner: s.config.owner,
    namespace: s.config.namespace,
    environment: s.config.environment,
    group: s.config.group,
    running: s.slots.used,
    waiting: s.slots.waiting,
    queued: s.queued,
    schedules: scheduleSnapshots(s.tracks, epoch !== undefined, s.config.cursors !== undefined),
    history: s.history.records(),
    counts: s.history.counts(),
  };
}
