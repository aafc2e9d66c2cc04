/**
 * What the scheduler remembers about each occurrence it decided on: one {@link ScheduleRecord} per run or
 * deliberate skip, kept in a bounded history.
 */

/** Where a record stands. `running` is the only state that changes later. */
export const State = Object.freeze({
  Running: 'running',
  Succeeded: 'succeeded',
  Failed: 'failed',
  Cancelled: 'cancelled',
  Skipped: 'skipped',
} as const);
export type State = (typeof State)[keyof typeof State];

/**
 * Why a record is failed, cancelled or skipped. Failed: `handler_failed` (the handler rejected or threw
 * an Error asynchronously), `panicked` (it threw synchronously, or threw something that is not an
 * Error), `hook_failed` (`when`, `before` or `after` threw), `timed_out`. Cancelled (the cursor does
 * not move, so the occurrence may run again): `stopped`, `leadership_lost`, `overlap_lost`. Skipped:
 * `overlap_busy`, `coordination_failed` (the overlap lease could not be asked for), `capacity_reached`,
 * `missed` (older than `grace`), `backlog_limited` (beyond `catchUp.max`), `filtered` (`when` said no,
 * or maintenance mode), `clock_failed` (the clock ran backwards or the schedule's spec threw).
 */
export const Reason = Object.freeze({
  HandlerFailed: 'handler_failed',
  HookFailed: 'hook_failed',
  Panicked: 'panicked',
  TimedOut: 'timed_out',
  Stopped: 'stopped',
  LeadershipLost: 'leadership_lost',
  OverlapLost: 'overlap_lost',
  OverlapBusy: 'overlap_busy',
  CoordinationFailed: 'coordination_failed',
  CapacityReached: 'capacity_reached',
  Missed: 'missed',
  BacklogLimited: 'backlog_limited',
  ClockFailed: 'clock_failed',
  Filtered: 'filtered',
} as const);
export type Reason = (typeof Reason)[keyof typeof Reason];

/** How an occurrence came to run: on time, caught up after downtime, or by `runNow`. */
export type Origin = 'scheduled' | 'catch_up' | 'manual';

/** One decision about one occurrence (or, for `missed` and `backlog_limited`, about several). */
export interface ScheduleRecord {
  /** Position in this scheduler's history (1, 2, …). */
  seq: number;
  /** The schedule id; `*` for an incident of the scheduler itself (a clock running backwards). */
  schedule: string;
  /** The occurrence id (stable across replicas and failover); for a group record, the latest one. */
  occurrence: string;
  /** The instant the occurrence was due (for a group record, the latest of the group). */
  intendedAt: Date;
  origin: Origin;
  state: State;
  reason?: Reason;
  /** Free-form detail: `maintenance` for a maintenance skip, the spec error, the clock reading. */
  detail?: string;
  /** For `missed` and `backlog_limited`: how many occurrences the record stands for. */
  count?: number;
  /** The leadership fencing token the decision was taken under (absent for manual runs). */
  epoch?: number;
  /** When the handler started and when the record was finished (scheduler clock). */
  startedAt?: Date;
  finishedAt?: Date;
  /** The error, rendered (`Name: message`), for failed records. */
  error?: string;
}

/** A record with its final state. */
export type FinishedRecord = ScheduleRecord & { state: Exclude<State, 'running'> };

/** Which outcomes move the cursor: everything but cancellation. */
export function advancesCursor(state: State): boolean {
  return state === State.Succeeded || state === State.Failed || state === State.Skipped;
}

/** Renders an error for a record: short, never throwing. */
export function describeError(error: unknown): string {
  try {
    if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 2000);
    return String(error).slice(0, 2000);
  } catch {
    return '[unprintable error]';
  }
}

/**
 * The last `max` records, oldest first, with counters over everything ever recorded. Records are
 * updated in place when a running one finishes.
 */
export class History {
  readonly max: number;
  readonly #ring: ScheduleRecord[] = [];
  #start = 0;
  #seq = 0;
  readonly #counts = new Map<string, number>();
  readonly #listener: ((record: ScheduleRecord) => void) | undefined;

  /** `listener` hears of every record when it is added and again when a running one finishes. */
  constructor(max: number, listener?: (record: ScheduleRecord) => void) {
    this.max = max;
    this.#listener = listener;
  }

  #tell(record: ScheduleRecord): void {
    if (!this.#listener) return;
    try {
      this.#listener({ ...record });
    } catch {
      // A listener's failure must not disturb the scheduler; it is the listener's to report.
    }
  }

  /** Adds a record (given without `seq`) and returns it. */
  add(record: Omit<ScheduleRecord, 'seq'>): ScheduleRecord {
    const full = { seq: ++this.#seq, ...record } as ScheduleRecord;
    if (this.#ring.length < this.max) this.#ring.push(full);
    else {
      this.#ring[this.#start] = full;
      this.#start = (this.#start + 1) % this.max;
    }
    if (full.state !== State.Running) this.#count(full);
    this.#tell(full);
    return full;
  }

  /** Finishes a running record in place. Returns false when it had already finished. */
  finish(
    record: ScheduleRecord,
    outcome: { state: Exclude<State, 'running'>; reason?: Reason; error?: string; finishedAt: Date },
  ): boolean {
    if (record.state !== State.Running) return false;
    record.state = outcome.state;
    if (outcome.reason !== undefined) record.reason = outcome.reason;
    if (outcome.error !== undefined) record.error = outcome.error;
    record.finishedAt = outcome.finishedAt;
    this.#count(record);
    this.#tell(record);
    return true;
  }

  #count(record: ScheduleRecord): void {
    const key = record.reason ? `${record.state}/${record.reason}` : record.state;
    this.#counts.set(key, (this.#counts.get(key) ?? 0) + 1);
  }

  /** Copies of the kept records, oldest first. */
  records(): ScheduleRecord[] {
    const ordered = [...this.#ring.slice(this.#start), ...this.#ring.slice(0, this.#start)];
    return ordered.map((r) => ({ ...r }));
  }

  /** Finished records ever counted, by `state` or `state/reason`. */
  counts(): Record<string, number> {
    return Object.fromEntries([...this.#counts].sort(([a], [b]) => (a < b ? -1 : 1)));
  }

  /** Records ever added. */
  get total(): number {
    return this.#seq;
  }
}
