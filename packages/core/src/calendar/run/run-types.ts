import type { Clock } from '../../clock.js';
import type { LeaseBackend } from '../../lease/types.js';
import type { Logger } from '../../logger.js';
import type { History, ScheduleRecord } from '../decide/records.js';
import type { AbortFanout, Slots } from '../decide/slots.js';
import type { Declaration } from '../declare/declarations.js';
import type { Invocation } from './invocation.js';

/** The types the runner and its guards share: what they need from the scheduler, and what they run. */

/** What the runner needs from the scheduler. */
export interface RunnerDependencies {
  leases: LeaseBackend;
  clock: Clock;
  logger: Logger;
  history: History;
  slots: Slots;
  capacityWait: number;
  /** Lease key of the overlap lock of a schedule. */
  overlapKey(scheduleId: string): string;
  /** A fresh owner id for one overlap holding. */
  overlapOwner(): string;
  /** Whether the application is in maintenance mode now. */
  maintenance(): Promise<boolean>;
  /** Aborted when the scheduler starts draining: occurrences not started yet are cancelled (`stopped`). */
  admissionSignal: AbortSignal;
  /** Aborted when running handlers must stop (after the drain timeout, or at once on `stop()`). */
  stopSignal: AbortSignal;
  /** Shared listeners on the signals above and on leadership signals. */
  fanout: AbortFanout;
  /** How often a queued occurrence asks again for an overlap lease held elsewhere (ms). */
  overlapRetry: number;
  /** Runs a started occurrence's work (hooks and handler), e.g. inside a span; called with the running record. */
  around?: (record: ScheduleRecord, work: () => Promise<void>) => Promise<void>;
}

/** One occurrence to run. */
export interface RunRequest {
  declaration: Declaration;
  invocation: Invocation;
  /** Leadership fencing token; absent for manual runs. */
  epoch?: number;
  /** Aborted when the leadership this run was admitted under is lost; absent for manual runs. */
  epochSignal?: AbortSignal;
}

/** A run in progress, as the scheduler tracks it. */
export interface ActiveRun {
  readonly record: ScheduleRecord;
  /** Resolves when the record is final (succeeded, failed, cancelled or skipped). */
  readonly finished: Promise<ScheduleRecord>;
  /** Resolves when the handler (and hooks) actually settled, or at once when they never started. */
  readonly settled: Promise<void>;
  /** Stops renewing the overlap lease without releasing it (the process is leaving). */
  abandon(): void;
}
