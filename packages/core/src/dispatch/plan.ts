import type { Settlement } from '../backend/contract.js';
import {
  dueOf,
  followingOccurrence,
  isOneShot,
  planOccurrence,
  type QueuedDelivery,
  recurringOccurrenceId,
  type StoredState,
  stateOf,
} from '../store/recurrence.js';
import type { Schedule } from '../store/types.js';
import type { DeliveryContext } from './types.js';

/** Which occurrences a decision did not run (see the `missed` event). */
export interface MissedOccurrences {
  count: number;
  first: Date;
  last: Date;
  /** `catch-up`: the recurrence's catch-up rule; `skipped`: `tx.skipNext`. */
  reason: 'catch-up' | 'skipped';
}

/** What a claimed schedule's delivery does, decided before any processor runs. */
export interface DeliveryPlan {
  /** What runs now: the schedule as the processor sees it, and its occurrence; none when nothing runs. */
  run?: { schedule: Schedule; occurrence?: DeliveryContext['occurrence']; failureAt?: Date };
  /** Occurrences not run by this decision. */
  missed?: MissedOccurrences;
  /**
   * What to arm once `run` ran (delivered or dead-lettered) — or, with nothing to run, instead: the
   * schedule's next own delivery, or its queue. None: nothing is left (the schedule is consumed).
   */
  next?: Settlement['next'];
}

/** The arm of a schedule at `at` with `state` (none when nothing is left to deliver). */
function arm(at: Date, state: StoredState | undefined): Settlement['next'] {
  const kept = state && isEmptyOneShot(state) ? undefined : state;
  const dueAt = dueOf(kept, at);
  if (dueAt === undefined) return undefined;
  return {
    at,
    ...(dueAt.getTime() !== at.getTime() ? { dueAt } : {}),
    ...(kept ? { recurrence: kept } : {}),
  };
}

function isEmptyOneShot(state: StoredState): boolean {
  return isOneShot(state) && !state.paused && !state.queue?.length && !state.ended;
}

/**
 * Decides a claimed schedule's delivery at `now`: a queued delivery (trigger, backfill, caught-up
 * occurrence) when one is due first, else the schedule's own (a one-shot's, or a recurrence's occurrence
 * under its catch-up rule and pending skips), else nothing.
 */
export function planDelivery(claimed: Schedule, now: number): DeliveryPlan {
  const state = stateOf(claimed);
  const head: QueuedDelivery | undefined = state?.queue?.[0];
  const ownDue = !state?.paused && !state?.ended && claimed.at.getTime() <= now;
  if (head && head.at <= now && (!ownDue || head.at <= claimed.at.getTime()))
    return planQueued(claimed, state!, head);
  if (!ownDue) return { next: arm(claimed.at, state) };
  const recurrence = claimed.recurrence;
  if (!recurrence) {
    // A one-shot's own delivery: whatever is still queued stays, delivered on its own.
    const rest = state?.queue?.length ? { ...state, ended: true as const } : undefined;
    return { run: { schedule: claimed }, ...(rest ? { next: arm(claimed.at, rest) } : {}) };
  }
  const carry = (stored: StoredState): StoredState => ({
    ...stored,
    ...(recurrence.queue ? { queue: recurrence.queue } : {}),
  });
  if (recurrence.skip && recurrence.skip > 0 && claimed.attempts === 0) {
    const following = followingOccurrence(recurrence, claimed.at, false);
    const skip = recurrence.skip - 1;
    const stored = { ...carry(following.stored), ...(skip > 0 ? { skip } : {}) } as StoredState;
    if (skip === 0) delete (stored as { skip?: number }).skip;
    return {
      missed: { count: 1, first: claimed.at, last: claimed.at, reason: 'skipped' },
      next: following.at ? arm(following.at, stored) : arm(claimed.at, { ...stored, ended: true }),
    };
  }
  const plan = planOccurrence(recurrence, claimed.at, claimed.attempts, now);
  const missed = plan.missed ? { ...plan.missed, reason: 'catch-up' as const } : undefined;
  if (plan.run === undefined)
    return {
      ...(missed ? { missed } : {}),
      next: plan.next ? arm(plan.next, recurrence) : arm(claimed.at, { ...recurrence, ended: true }),
    };
  const schedule = plan.run.getTime() === claimed.at.getTime() ? claimed : { ...claimed, at: plan.run };
  const following = followingOccurrence(recurrence, plan.run, true);
  return {
    run: {
      schedule,
      occurrence: {
        at: plan.run,
        id: recurringOccurrenceId(claimed.key, plan.run),
        number: recurrence.count + 1,
        kind: 'scheduled',
      },
      failureAt: plan.run,
    },
    ...(missed ? { missed } : {}),
    next: following.at
      ? arm(following.at, carry(following.stored))
      : arm(plan.run, { ...carry(following.stored), ended: true }),
  };
}

/** A queued delivery's plan: it runs; then the queue moves on and the schedule's own deadline stays. */
function planQueued(claimed: Schedule, state: StoredState, head: QueuedDelivery): DeliveryPlan {
  const rest: StoredState = { ...state, queue: state.queue!.slice(1) };
  if (rest.queue!.length === 0) delete rest.queue;
  const counted = head.kind === 'occurrence' && !isOneShot(rest);
  if (counted && !isOneShot(rest)) rest.count += 1;
  const at = new Date(head.at);
  const count = claimed.recurrence?.count ?? 0;
  return {
    run: {
      schedule: { ...claimed, at },
      occurrence: {
        at,
        id: head.kind === 'trigger' && head.id ? head.id : recurringOccurrenceId(claimed.key, at),
        number: counted ? count + 1 : count,
        kind: head.kind === 'trigger' ? 'triggered' : head.kind === 'backfill' ? 'backfill' : 'caught-up',
      },
    },
    next: arm(claimed.at, rest),
  };
}
