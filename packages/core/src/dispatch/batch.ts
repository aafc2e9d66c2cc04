import { performance } from 'node:perf_hooks';
import type { Claimed, Settlement } from '../backend/contract.js';
import type { Clock } from '../clock.js';
import { ConflictError, describeValue } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Delivery, PartResult } from '../store/delivery.js';
import type { Message, Schedule } from '../store/types.js';
import { type DeliveryPlan, type MissedOccurrences, planDelivery } from './plan.js';
import {
  type DeliveryContext,
  DeliveryInterruptedError,
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
  /** Runs the processors at once where it can (the dispatcher's `pipeline` option). */
  pipeline?: boolean;
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
  /** For a `missed` part: the occurrences not run. */
  missed?: MissedOccurrences;
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
  /**
   * Claimed schedules put back unrun because an earlier attempt of theirs crashed its process and they
   * were claimed together with others: they are delivered alone.
   */
  isolated: number;
  /** The earliest deadline the batch's processors scheduled, when they scheduled anything. */
  earliest: number | undefined;
  scheduled: boolean;
}

/** How often one part is re-run in place after an optimistic conflict inside it (as `store.transact`). */
const CONFLICT_RETRIES = 10;

/** What one part decided. */
export type Outcome =
  | 'delivered'
  | 'failed'
  | 'retried'
  | 'deadLettered'
  | 'conflict'
  | 'missed'
  /** Nothing was due after all (its due time is set right again): no event. */
  | 'rearmed';

/**
 * Runs one delivery batch: each claimed schedule's processor in turn, inside the delivery transaction,
 * then one commit. Any failure of the transaction itself (not of a processor) rolls the whole batch back
 * and is thrown: every claimed schedule is then still pending, as it was.
 */
export async function runBatch<Sql>(
  delivery: Delivery<Sql>,
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
    isolated: 0,
    earliest: undefined,
    scheduled: false,
  };
  const outcomes = new Map<string, Outcome>();
  let started = performance.now();
  const alone = delivery.claimed.length === 1;
  try {
    let order = delivery.claimed;
    const pipelined =
      settings.pipeline && delivery.concurrent && !alone && settings.running()
        ? await runTogether(delivery, settings, result)
        : undefined;
    const together = pipelined?.outcomes;
    if (pipelined?.failed !== undefined) {
      // The group was undone: its time is not this run's, and the schedule whose processor failed first
      // goes first, so its failure is recorded even if the budget sends the rest back.
      started = performance.now();
      const first = pipelined.failed;
      order = [...order.filter((s) => s.key === first), ...order.filter((s) => s.key !== first)];
    }
    for (const schedule of order) {
      const outcome = together?.get(schedule.key);
      if (outcome !== undefined) {
        outcomes.set(schedule.key, outcome);
        continue;
      }
      if (schedule.interrupted) {
        // Its last delivery died with its process: that counts as a failed attempt, recorded now, and it
        // is delivered alone later (not with this batch's other schedules).
        outcomes.set(schedule.key, await interrupted(delivery, schedule, settings, result));
        continue;
      }
      if (!settings.running() || performance.now() - started >= settings.budgetMs) {
        result.returned++;
        continue; // released at the commit
      }
      if (!alone && isIsolated(schedule)) {
        result.isolated++;
        continue; // released: delivered alone by a later claim
      }
      const begin = performance.now();
      outcomes.set(schedule.key, await deliverOne(delivery, schedule, settings, result));
      result.processed++;
      result.processMs += performance.now() - begin;
    }
    const rejected = await delivery.commit();
    if (settings.observer)
      for (const part of settings.observer.parts) {
        if (part.fate !== undefined) continue; // a pipelined run that was undone and run again
        const reason = rejected.size === 0 ? undefined : rejected.get(part.schedule.key);
        part.fate = reason === undefined ? part.outcome : isStale(reason) ? 'skipped' : 'conflict';
      }
    for (const [key, outcome] of outcomes) {
      const reason = rejected.get(key);
      if (reason === undefined) {
        if (outcome === 'conflict') result.conflicts++;
        else if (outcome !== 'missed' && outcome !== 'rearmed') result[outcome]++;
      } else if (isStale(reason)) result.skipped++;
      else {
        result.conflicts++;
        if (!(reason instanceof ConflictError))
          settings.logger.warn('a delivery could not be committed; it stays pending', { key, error: reason });
      }
    }
    return result;
  } catch (error) {
    if (settings.observer) for (const part of settings.observer.parts) part.fate = 'rolledBack';
    await delivery.rollback().catch((rollbackError: unknown) => {
      settings.logger.warn('rolling back a delivery batch failed', { error: rollbackError });
    });
    throw error;
  }
}

/**
 * Runs at once the processors of the batch's schedules that need nothing but their processor (the
 * `pipeline` option): no catch-up decision, no crashed attempt. Returns their outcomes once settled;
 * nothing when fewer than two qualify; or, when one failed, the key of the one that failed first: then
 * every write of the group is undone and the batch runs them one by one (a second run: the group's run
 * is not an attempt).
 */
async function runTogether<Sql>(
  delivery: Delivery<Sql>,
  s: BatchSettings<Sql>,
  result: BatchResult,
): Promise<{ outcomes?: Map<string, Outcome>; failed?: string } | undefined> {
  const now = s.clock.now();
  const group: {
    claimed: Claimed;
    run: NonNullable<DeliveryPlan['run']>;
    plan: DeliveryPlan;
    attempt: number;
    watch?: ObservedPart;
    ms: number;
  }[] = [];
  for (const claimed of delivery.claimed) {
    if (claimed.interrupted || isIsolated(claimed)) continue;
    const plan = planDelivery(claimed, now);
    if (plan.missed || !plan.run) continue;
    group.push({ claimed, run: plan.run, plan, attempt: plan.run.schedule.attempts + 1, ms: 0 });
  }
  if (group.length < 2) return undefined;
  if (s.observer)
    for (const g of group)
      g.watch = observe(s.observer, s.clock, g.claimed, g.run.schedule, g.attempt, g.run.occurrence);
  const started = performance.now();
  let failed: string | undefined;
  let parts: PartResult[];
  try {
    parts = await delivery.together(
      group.map((g) => async (tx) => {
        const begin = performance.now();
        const { schedule, occurrence } = g.run;
        const context: DeliveryContext = {
          schedule,
          attempt: g.attempt,
          signal: s.signal,
          ...(occurrence ? { occurrence } : {}),
        };
        const message = processorMessage(schedule.message);
        try {
          if (g.watch && s.observer) await s.observer.run(g.watch, () => s.processor(tx, message, context));
          else await s.processor(tx, message, context);
        } catch (error) {
          failed ??= schedule.key;
          throw error;
        } finally {
          g.ms = performance.now() - begin;
        }
      }),
    );
  } catch (error) {
    for (const g of group)
      if (g.watch) {
        g.watch.fate = 'rolledBack';
        g.watch.durationMs = g.ms;
      }
    s.logger.debug('a processor of a pipelined batch failed; its schedules run again one by one', {
      error,
      schedules: group.length,
    });
    // What they took still sizes the next batches (slow processors, smaller batches).
    result.processed += group.length;
    result.processMs += performance.now() - started;
    return { failed: failed ?? group[0]!.run.schedule.key };
  }
  const outcomes = new Map<string, Outcome>();
  group.forEach((g, i) => {
    noteScheduled(result, parts[i]!);
    delivery.settle({
      schedule: g.run.schedule,
      outcome: 'consume',
      writes: [],
      ...(g.plan.next ? { next: g.plan.next } : {}),
    });
    if (g.watch) {
      g.watch.outcome = 'delivered';
      g.watch.durationMs = g.ms;
    }
    outcomes.set(g.run.schedule.key, 'delivered');
  });
  // They ran at once: what one took is the group's time shared out (what batch sizing needs).
  result.processed += group.length;
  result.processMs += performance.now() - started;
  return { outcomes };
}

/** Whether the last attempt of `schedule` crashed its process (so it is delivered alone). */
export function isIsolated(schedule: Schedule): boolean {
  return schedule.lastError?.startsWith(`${DeliveryInterruptedError.name}:`) === true;
}

/**
 * A schedule whose previous delivery was interrupted by the death of its process: the attempt counts (the
 * error says so), and after `maxAttempts` of them the message is dead-lettered like any failure.
 */
async function interrupted<Sql>(
  delivery: Delivery<Sql>,
  claimed: Claimed,
  s: BatchSettings<Sql>,
  result: BatchResult,
): Promise<Outcome> {
  const plan = planDelivery(claimed, s.clock.now());
  const run = plan.run ?? { schedule: claimed };
  const attempt = claimed.attempts + 1;
  const error = new DeliveryInterruptedError(attempt);
  const watch = s.observer
    ? observe(s.observer, s.clock, claimed, run.schedule, attempt, run.occurrence)
    : undefined;
  if (watch) watch.durationMs = 0;
  const outcome = await failed(delivery, run, plan, attempt, error, s, result, watch);
  if (watch) watch.outcome = outcome;
  return outcome;
}

/** A commit's reason for leaving a part out that means the version was stale (replaced or consumed). */
function isStale(reason: Error): boolean {
  return reason instanceof ConflictError && reason.kind === 'schedule';
}

/**
 * Delivers one claimed schedule: decides what runs (a queued delivery, or the schedule's own under its
 * catch-up rule and skips), runs the processor in a part of its own, and settles what its outcome needs
 * recorded; what comes next (the recurrence's next occurrence, the rest of the queue) is armed in the
 * same settlement once this one has run.
 */
async function deliverOne<Sql>(
  delivery: Delivery<Sql>,
  claimed: Schedule,
  s: BatchSettings<Sql>,
  result: BatchResult,
): Promise<Outcome> {
  const plan = planDelivery(claimed, s.clock.now());
  if (plan.missed) {
    result.missed += plan.missed.count;
    s.observer?.parts.push({
      schedule: claimed,
      attempt: claimed.attempts + 1,
      outcome: 'missed',
      missed: plan.missed,
      startedAt: s.clock.now(),
      latenessMs: Math.max(0, s.clock.now() - claimed.dueAt.getTime()),
      durationMs: 0,
    });
  }
  if (!plan.run) {
    delivery.settle({
      schedule: claimed,
      outcome: 'consume',
      writes: [],
      ...(plan.next ? { next: plan.next } : {}),
    });
    return plan.missed ? 'missed' : 'rearmed';
  }
  const run = plan.run;
  const attempt = run.schedule.attempts + 1;
  const watch = s.observer
    ? observe(s.observer, s.clock, claimed, run.schedule, attempt, run.occurrence)
    : undefined;
  if (!watch) return runPart(delivery, run, plan, attempt, s, result, undefined);
  try {
    watch.outcome = await runPart(delivery, run, plan, attempt, s, result, watch);
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
  delivery: Delivery<Sql>,
  run: NonNullable<DeliveryPlan['run']>,
  plan: DeliveryPlan,
  attempt: number,
  s: BatchSettings<Sql>,
  result: BatchResult,
  watch: ObservedPart | undefined,
): Promise<Outcome> {
  const { schedule, occurrence } = run;
  for (let conflicts = 0; ; conflicts++) {
    try {
      const context: DeliveryContext = {
        schedule,
        attempt,
        signal: s.signal,
        ...(occurrence ? { occurrence } : {}),
      };
      const message = processorMessage(schedule.message);
      const part = await delivery.part(async (tx) => {
        if (watch && s.observer) await s.observer.run(watch, () => s.processor(tx, message, context));
        else await s.processor(tx, message, context);
      });
      noteScheduled(result, part);
      delivery.settle({
        schedule,
        outcome: 'consume',
        writes: part.writes,
        ...(plan.next ? { next: plan.next } : {}),
      });
      return 'delivered';
    } catch (error) {
      if (error instanceof ConflictError && error.kind !== 'schedule') {
        if (conflicts < CONFLICT_RETRIES) continue;
        // Still contended: leave it pending, unchanged, for the next pass (released at the commit).
        return 'conflict';
      }
      return failed(delivery, run, plan, attempt, error, s, result, watch);
    }
  }
}

/** The processor's own copy of a message, without the trace context the dispatcher reads. */
function processorMessage(message: Message): Message {
  const copy = structuredClone(message);
  if (copy.trace !== undefined) delete copy.trace;
  return copy;
}

function noteScheduled(
  result: BatchResult,
  part: { scheduled: boolean; earliest: number | undefined },
): void {
  if (!part.scheduled) return;
  result.scheduled = true;
  if (part.earliest !== undefined && (result.earliest === undefined || part.earliest < result.earliest))
    result.earliest = part.earliest;
}

async function failed<Sql>(
  delivery: Delivery<Sql>,
  run: NonNullable<DeliveryPlan['run']>,
  plan: DeliveryPlan,
  attempt: number,
  error: unknown,
  s: BatchSettings<Sql>,
  result: BatchResult,
  watch?: ObservedPart,
): Promise<Outcome> {
  const { schedule } = run;
  const quiet = error instanceof RetryError;
  if (watch) watch.error = error;
  const fields = { key: schedule.key, version: schedule.version, type: schedule.message.type, attempt };
  if (!quiet && (attempt >= s.maxAttempts || error instanceof UnrecoverableError)) {
    const hook = await deadLetter(delivery, schedule, attempt, error, s, result);
    if (hook) {
      s.logger.error('message dead-lettered', { ...fields, attempts: attempt, error });
      delivery.settle({
        schedule,
        outcome: 'consume',
        dead: { attempts: attempt, error: describeError(error), deadAt: new Date(s.clock.now()) },
        writes: hook.writes,
        ...(plan.next ? { next: plan.next } : {}),
      });
      return 'deadLettered';
    }
    // The dead-letter hook failed: keep the message, recording this attempt; the next one tries again.
  }
  const delay = quiet && error.delay !== undefined ? error.delay : s.retryDelay(attempt, error);
  if (!quiet)
    s.logger.warn(
      error instanceof DeliveryInterruptedError
        ? 'a delivery was interrupted by the death of its process; will retry alone'
        : 'processor failed; will retry',
      { ...fields, error, retryInMs: delay },
    );
  const dueAt = new Date(s.clock.now() + delay);
  if (watch) watch.retryAt = dueAt;
  delivery.settle({
    schedule,
    outcome: 'retry',
    writes: [],
    failure: {
      attempts: quiet ? schedule.attempts : attempt,
      dueAt,
      error: describeError(error),
      // A recurring schedule's catch-up may have moved on to a later occurrence: retries are of that one.
      ...(run.failureAt ? { at: run.failureAt } : {}),
    },
  });
  return quiet ? 'retried' : 'failed';
}

/**
 * Runs the dead-letter hook in a part of its own; returns its writes when it succeeded (the schedule is
 * then consumed), undefined when it failed.
 */
async function deadLetter<Sql>(
  delivery: Delivery<Sql>,
  schedule: Schedule,
  attempts: number,
  error: unknown,
  s: BatchSettings<Sql>,
  result: BatchResult,
): Promise<{ writes: Settlement['writes'] } | undefined> {
  const hook = s.onDeadLetter;
  if (!hook) return { writes: [] };
  try {
    const part = await delivery.part(async (tx) => {
      await hook({ schedule, error, attempts }, tx);
    });
    noteScheduled(result, part);
    return part;
  } catch (hookError) {
    s.logger.error('the dead-letter hook failed; the message stays pending', {
      key: schedule.key,
      version: schedule.version,
      error: hookError,
    });
    return undefined;
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
