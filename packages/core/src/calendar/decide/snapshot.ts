import type { ResolvedConfig } from '../declare/config.js';
import type { DeclarationDescription } from '../declare/declarations.js';
import type { Track } from './cursor-book.js';
import type { ScheduleRecord } from './records.js';

export type SchedulerState = 'idle' | 'running' | 'draining' | 'stopped';

/** One schedule in a {@link SchedulerSnapshot}. */
export interface ScheduleSnapshot {
  id: string;
  /** False when the declaration's `environments` exclude this scheduler's environment. */
  active: boolean;
  /** The next occurrence this leader will look at (leaders only). */
  next?: Date;
  /** The latest occurrence decided and persisted (or, without a cursor backend, kept in memory). */
  cursor?: Date;
  /** Handlers of this schedule running now. */
  running: number;
}

export interface SchedulerSnapshot {
  state: SchedulerState;
  leader: boolean;
  /** The fencing token of the current leadership. */
  epoch?: number;
  owner: string;
  namespace: string;
  environment: string;
  group: string;
  /** Handlers holding a concurrency slot, and occurrences waiting for one. */
  running: number;
  waiting: number;
  /** Occurrences waiting for their schedule's previous run to end (`onOverlap: 'queue'`). */
  queued: number;
  schedules: ScheduleSnapshot[];
  /** The last `maxHistory` records, oldest first. */
  history: ScheduleRecord[];
  /** Finished records ever, by `state` or `state/reason`. */
  counts: Record<string, number>;
}

/** A JSON-safe description of a scheduler and its declarations. */
export interface SchedulerDescription {
  namespace: string;
  environment: string;
  group: string;
  owner: string;
  config: Record<string, number | boolean>;
  schedules: (DeclarationDescription & { active: boolean })[];
}

/** The per-schedule part of a snapshot. `leading` says whether next occurrences are meaningful. */
export function scheduleSnapshots(
  tracks: Iterable<Track>,
  leading: boolean,
  durableCursors: boolean,
): ScheduleSnapshot[] {
  return [...tracks].map((t) => {
    const cursor = t.persisted ?? (durableCursors ? undefined : t.target);
    return {
      id: t.declaration.id,
      active: t.active,
      ...(leading && Number.isFinite(t.due) ? { next: new Date(t.due) } : {}),
      ...(cursor !== undefined ? { cursor: new Date(cursor) } : {}),
      running: t.running,
    };
  });
}

/** A JSON-safe description of a scheduler's configuration and declarations. */
export function describeScheduler(c: ResolvedConfig, tracks: Iterable<Track>): SchedulerDescription {
  return {
    namespace: c.namespace,
    environment: c.environment,
    group: c.group,
    owner: c.owner,
    config: {
      concurrency: c.concurrency,
      maxHistory: c.maxHistory,
      maxPerTick: c.maxPerTick,
      pollInterval: c.pollInterval,
      leadershipTTL: c.leadershipTTL,
      grace: c.grace,
      capacityWait: c.capacityWait,
      drainTimeout: c.drainTimeout,
      cursorTTL: c.cursorTTL,
      cursors: c.cursors !== undefined,
    },
    schedules: [...tracks].map((t) => ({ ...t.declaration.describe(), active: t.active })),
  };
}

/** A replica starting or ending a leadership epoch of its group. */
export interface LeadershipEvent {
  namespace: string;
  environment: string;
  group: string;
  /** This replica's owner id. */
  owner: string;
  /** The epoch's fencing token. */
  epoch: number;
}

/**
 * The events of a {@link Scheduler} (`scheduler.on(name, listener)`). A listener that throws is logged
 * and changes nothing.
 */
export interface SchedulerEvents {
  /** This replica became its group's leader: a new epoch with a larger token. */
  leadershipAcquired: LeadershipEvent;
  /**
   * This replica's epoch ended: `expired` or `taken` (see LeaseLossReason) when it was lost, `resigned`
   * when the scheduler gave leadership up (drain, stop).
   */
  leadershipLost: LeadershipEvent & { reason: string };
  /** An occurrence started running (its record is `running`). */
  occurrenceAdmitted: { record: ScheduleRecord };
  /**
   * An occurrence's record is final: it ran (succeeded, failed, cancelled) or was skipped or cancelled
   * before it started (then without an `occurrenceAdmitted` before it).
   */
  occurrenceFinished: { record: ScheduleRecord };
}

/** The names of {@link SchedulerEvents}. */
export const SCHEDULER_EVENTS: readonly (keyof SchedulerEvents)[] = Object.freeze([
  'leadershipAcquired',
  'leadershipLost',
  'occurrenceAdmitted',
  'occurrenceFinished',
]);
