import { performance } from 'node:perf_hooks';
import type { Clock } from '../clock.js';
import { ConflictError, describeValue } from '../errors.js';
import type { Logger } from '../logger.js';
import type { DeliveryTransaction } from '../store/driver.js';
import { followingOccurrence, planOccurrence, recurringOccurrenceId } from '../store/recurrence.js';
import { CoreTransaction } from '../store/transaction.js';
import type { Message, Schedule } from '../store/types.js';
import {
  type DeliveryContext,
  type DispatcherOptions,
  type Processor,
  RetryError,
  UnrecoverableError,
} from './types.js';

/** What one batch needs from its dispatcher. */
export interface BatchSettings<Sql> {
  processor: Processor<Sql>;
  onDeadLetter: DispatcherOptions<never, Sql>['onDeadLetter'];
  maxAttempts: number;
  retryDelay: (attempt: number, error: unknown) => number;
  clock: Clock;
  logger: Logger;
  /** Aborted when a drain gives up waiting. */
  signal: AbortSignal;
  /** Whether the dispatcher still takes new work (false while draining). */
  running(): boolean;
  /** Real milliseconds after which the batch stops starting processors and commits. */
  budgetMs: number;
  /** Present when someone listens (events, telemetry): hears of each part, and of its fate after commit. */
  observer?: BatchObserver | undefined;
}

/** How a part ended once the batch committed (or `rolledBack` when the whole batch did not). */
export type Fate = Outcome | 'skipped' | 'rolledBack';

/** One claimed schedule a batch ran (or, for a missed occurrence, decided on), for events and telemetry. */
export interface ObservedPart {
  /** The schedule delivered (for a recurring one caught up to a later occurrence, that occurrence). */
  schedule: Schedule;
  attempt: number;
  occurrence?: DeliveryContext['occurrence'];
  /** What the part decided; {@link fate} is what the commit made of it. */
  outcome: Outcome;
  fate?: Fate;
  /** The processor's error, for failed, retried and dead-lettered parts. */
  error?: unknown;
  /** When a failed or retried part is due again. */
  retryAt?: Date;
  /** When the processor started (the dispatcher's clock, ms) and how late that was after `dueAt`. */
  startedAt: number;
  latenessMs: number;
  /** Real time the part took, in ms. */
  durationMs: number;
  /** The observer's own state for the part (its span). */
  handle?: unknown;
}

/** Watches a batch's parts: see {@link BatchSettings.observer}. */
export interface BatchObserver {
  /** Every part, in order, with its fate filled in after the commit (or the rollback). */
  readonly parts: ObservedPart[];
  /** Called before a part's processor runs. */
  begin(part: ObservedPart): void;
  /** Runs the part's processor (inside the part's trace context, when there is one). */
  run<T>(part: ObservedPart, fn: () => T): T;
}

/** What a batch did, for the dispatcher's counters and its batch sizing. */
export interface BatchResult {
  delivered: number;
  failed: number;
  retried: number;
  deadLettered: number;
  skipped: number;
  conflicts: number;
  /** Occurrences of recurring schedules not run under their catch-up rule. */
  missed: number;
  /** Processors run and the real time they took in all, in ms. */
  processed: number;
  processMs: number;
  /** Claimed schedules put back unrun (drain, or the time budget ran out). */
  returned: number;
  /** The earliest deadline the batch's processors scheduled, when they scheduled anything. */
  earliest: number | undefined;
  scheduled: boolean;
}

/** How often one part is re-run in place after an optimistic conflict inside it (as `store.transact`). */
const CONFLICT_RETRIES = 10;

/** What one part decided. */
export type Outcome = 'delivered' | 'failed' | 'retried' | 'deadLettered' | 'conflict' | 'missed';

/**
 * Runs one delivery batch: each claimed schedule's processor in turn, inside the delivery transaction,
 * then one commit. Any failure of the transaction itself (not of a processor) rolls the whole batch back
 * and is thrown: every claimed schedule is then still pending, as it was.
 */
export async function runBatch<Sql>(
  tx: DeliveryTransaction<Sql>,
  settings: BatchSettings<Sql>,
): Promise<BatchResult> {
  const result: BatchResult = {
    delivered: 0,
    failed: 0,
    retried: 0,
    deadLettered: 0,
    skipped: 0,
    conflicts: 0,
    missed: 0,
    processed: 0,
    processMs: 0,
    returned: 0,
    earliest: undefined,
    scheduled: false,
  };
  const outcomes = new Map<string, Outcome>();
  const started = performance.now();
  try {
    for (const schedule of tx.claimed) {
      if (!settings.running() || performance.now() - started >= settings.budgetMs) {
        await tx.restore(schedule);
        result.returned++;
        continue;
      }
      const begin = performance.now();
      outcomes.set(schedule.key, await deliverOne(tx, schedule, settings, result));
      result.processed++;
      result.processMs += performance.now() - begin;
    }
    const rejected = await tx.commit();
    if (settings.observer)
      for (const part of settings.observer.parts) {
        const reason = rejected.size === 0 ? undefined : rejected.get(part.schedule.key);
        part.fate = reason === undefined ? part.outcome : isStale(reason) ? 'skipped' : 'conflict';
      }
    for (const [key, outcome] of outcomes) {
      const reason = rejected.get(key);
      if (reason === undefined) result[outcome === 'conflict' ? 'conflicts' : outcome]++;
      else if (isStale(reason)) result.skipped++;
      else {
        result.conflicts++;
        if (!(reason instanceof ConflictError))
          settings.logger.warn('a delivery could not be committed; it stays pending', { key, error: reason });
      }
    }
    return result;
  } catch (error) {
    if (settings.observer) for (const part of settings.observer.parts) part.fate = 'rolledBack';
    await tx.rollback().catch((rollbackError: unknown) => {
      settings.logger.warn('rolling back a delivery batch failed', { error: rollbackError });
    });
    throw error;
  }
}

/** A commit's reason for leaving a part out that means the version was stale (replaced or consumed). */
function isStale(reason: Error): boolean {
  return reason instanceof ConflictError && reason.kind === 'schedule';
}

/**
 * Runs one part: the processor in a savepoint of its own, then what its outcome needs recorded. A
 * recurring schedule first goes through its catch-up rule (which may run a later occurrence, or none), and
 * its next occurrence is armed in the same part once this one has run.
 */
async function deliverOne<Sql>(
  tx: DeliveryTransaction<Sql>,
  claimed: Schedule,
  s: BatchSettings<Sql>,
  result: BatchResult,
): Promise<Outcome> {
  let schedule = claimed;
  let occurrence: DeliveryContext['occurrence'];
  const recurrence = claimed.recurrence;
  if (recurrence) {
    const plan = planOccurrence(recurrence, claimed.at, claimed.attempts, s.clock.now());
    if (plan.run === undefined) {
      if (plan.next) await tx.rearm(claimed, plan.next, recurrence);
      s.observer?.parts.push({
        schedule: claimed,
        attempt: claimed.attempts + 1,
        outcome: 'missed',
        startedAt: s.clock.now(),
        latenessMs: Math.max(0, s.clock.now() - claimed.dueAt.getTime()),
        durationMs: 0,
      });
      return 'missed';
    }
    if (plan.run.getTime() !== claimed.at.getTime()) schedule = { ...claimed, at: plan.run };
    occurrence = {
      at: plan.run,
      id: recurringOccurrenceId(claimed.key, plan.run),
      number: recurrence.count + 1,
    };
  }
  const attempt = schedule.attempts + 1;
  const watch = s.observer ? observe(s.observer, s.clock, claimed, schedule, attempt, occurrence) : undefined;
  if (!watch) return runPart(tx, schedule, attempt, occurrence, s, result, undefined);
  try {
    watch.outcome = await runPart(tx, schedule, attempt, occurrence, s, result, watch);
    return watch.outcome;
  } finally {
    // Also when the transaction itself failed (the batch then rolls back, and the part with it).
    watch.durationMs = performance.now() - watch.durationMs;
  }
}

/** Starts watching a part: `durationMs` holds the start's real time until the part ends. */
function observe(
  observer: BatchObserver,
  clock: Clock,
  claimed: Schedule,
  schedule: Schedule,
  attempt: number,
  occurrence: DeliveryContext['occurrence'],
): ObservedPart {
  const now = clock.now();
  const part: ObservedPart = {
    schedule,
    attempt,
    ...(occurrence ? { occurrence } : {}),
    outcome: 'conflict',
    startedAt: now,
    latenessMs: Math.max(0, now - claimed.dueAt.getTime()),
    durationMs: performance.now(),
  };
  observer.parts.push(part);
  observer.begin(part);
  return part;
}

async function runPart<Sql>(
  tx: DeliveryTransaction<Sql>,
  schedule: Schedule,
  attempt: number,
  occurrence: DeliveryContext['occurrence'],
  s: BatchSettings<Sql>,
  result: BatchResult,
  watch: ObservedPart | undefined,
): Promise<Outcome> {
  for (let conflicts = 0; ; conflicts++) {
    const part = openPart(tx, schedule, s.clock, result);
    try {
      const context: DeliveryContext = {
        schedule,
        attempt,
        signal: s.signal,
        ...(occurrence ? { occurrence } : {}),
      };
      const message = processorMessage(schedule.message);
      if (watch && s.observer) await s.observer.run(watch, () => s.processor(part.tx, message, context));
      else await s.processor(part.tx, message, context);
      await part.end();
      await armNext(tx, schedule);
      return 'delivered';
    } catch (error) {
      await part.undo();
      if (error instanceof ConflictError && error.kind !== 'schedule') {
        if (conflicts < CONFLICT_RETRIES) continue;
        // Still contended: leave it pending, unchanged, for the next pass.
        await tx.restore(schedule);
        return 'conflict';
      }
      return failed(tx, schedule, attempt, error, s, result, watch);
    }
  }
}

/** The processor's own copy of a message, without the trace context the dispatcher reads. */
function processorMessage(message: Message): Message {
  const copy = structuredClone(message);
  if (copy.trace !== undefined) delete copy.trace;
  return copy;
}

/** A processor's view of the batch: its own Transaction, whose first use takes the part's savepoint. */
function openPart<Sql>(tx: DeliveryTransaction<Sql>, schedule: Schedule, clock: Clock, result: BatchResult) {
  let touched = false;
  const view = new CoreTransaction<Sql>(tx, clock, () => {
    if (touched) return;
    touched = true;
    tx.savepoint(schedule.key);
  });
  const close = () => {
    view.finish();
    if (view.scheduled) {
      result.scheduled = true;
      if (view.earliest !== undefined && (result.earliest === undefined || view.earliest < result.earliest))
        result.earliest = view.earliest;
    }
  };
  return {
    tx: view,
    /** Keeps the part: checks that it left the transaction usable (throws when not). */
    async end() {
      view.finish();
      if (touched) await tx.releaseSavepoint();
      close();
    },
    /** Drops everything the part did. */
    async undo() {
      view.finish();
      if (touched) await tx.rollbackToSavepoint();
    },
  };
}

/** After an occurrence ran (delivered or dead-lettered): arms the next one, unless the recurrence ended. */
async function armNext<Sql>(tx: DeliveryTransaction<Sql>, ran: Schedule): Promise<void> {
  if (!ran.recurrence) return;
  const next = followingOccurrence(ran.recurrence, ran.at, true);
  if (next.at) await tx.rearm(ran, next.at, next.stored);
}

async function failed<Sql>(
  tx: DeliveryTransaction<Sql>,
  schedule: Schedule,
  attempt: number,
  error: unknown,
  s: BatchSettings<Sql>,
  result: BatchResult,
  watch?: ObservedPart,
): Promise<Outcome> {
  const quiet = error instanceof RetryError;
  if (watch) watch.error = error;
  const fields = { key: schedule.key, version: schedule.version, type: schedule.message.type, attempt };
  if (!quiet && (attempt >= s.maxAttempts || error instanceof UnrecoverableError)) {
    if (await deadLetter(tx, schedule, attempt, error, s, result)) {
      s.logger.error('message dead-lettered', { ...fields, attempts: attempt, error });
      await tx.deadLetter(schedule, {
        attempts: attempt,
        error: describeError(error),
        deadAt: new Date(s.clock.now()),
      });
      await armNext(tx, schedule);
      return 'deadLettered';
    }
    // The dead-letter hook failed: keep the message, recording this attempt; the next one tries again.
  }
  const delay = quiet && error.delay !== undefined ? error.delay : s.retryDelay(attempt, error);
  if (!quiet) s.logger.warn('processor failed; will retry', { ...fields, error, retryInMs: delay });
  const dueAt = new Date(s.clock.now() + delay);
  if (watch) watch.retryAt = dueAt;
  await tx.restore(schedule, {
    attempts: quiet ? schedule.attempts : attempt,
    dueAt,
    error: describeError(error),
    // A recurring schedule's catch-up may have moved on to a later occurrence: retries are of that one.
    ...(schedule.recurrence ? { at: schedule.at } : {}),
  });
  return quiet ? 'retried' : 'failed';
}

/** Runs the dead-letter hook in a part of its own; the schedule stays consumed when it succeeds. */
async function deadLetter<Sql>(
  tx: DeliveryTransaction<Sql>,
  schedule: Schedule,
  attempts: number,
  error: unknown,
  s: BatchSettings<Sql>,
  result: BatchResult,
): Promise<boolean> {
  if (!s.onDeadLetter) return true;
  const part = openPart(tx, schedule, s.clock, result);
  try {
    await s.onDeadLetter({ schedule, error, attempts }, part.tx);
    await part.end();
    return true;
  } catch (hookError) {
    await part.undo();
    s.logger.error('the dead-letter hook failed; the message stays pending', {
      key: schedule.key,
      version: schedule.version,
      error: hookError,
    });
    return false;
  }
}

/** An error as the text stored with a failed attempt. */
export function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 2000);
  let text: string;
  try {
    text = String(error);
  } catch {
    // An object with no prototype (or a hostile toString) cannot be turned into a string directly.
    text = describeValue(error);
  }
  return text.slice(0, 2000);
}
