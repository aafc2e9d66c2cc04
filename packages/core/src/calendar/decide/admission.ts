import type { Spec } from '../../time/spec.js';
import type { Window } from '../../time/window.js';
import { zoneOffsets } from '../../time/zone.js';
import type { Origin } from './records.js';

/**
 * Which occurrences of a schedule to run, skip as missed, or fold into a backlog record, given what was
 * already decided and the time now. Pure: no I/O, no clock.
 */

/** Occurrences examined at most by one plan (then the count is capped). */
export const MAX_STEPS = 100_000;
/**
 * Candidates a filtered search examines at most before it concludes there is no next occurrence. Jumps
 * over rejected days and hours make this ample for any schedule whose windows ever allow it.
 */
export const MAX_SEARCH_STEPS = 10_000;

const DAY_MS = 86_400_000;

/** Next/previous occurrence on epoch milliseconds; NaN when there is none. */
export interface Timeline {
  nextMs(afterMs: number): number;
  prevMs(beforeMs: number): number;
}

/** Reads a spec through its fast millisecond methods when it has them (the built-in specs do). */
function baseTimeline(spec: Spec): Timeline {
  const fast = spec as Partial<Timeline>;
  if (typeof fast.nextMs === 'function' && typeof fast.prevMs === 'function')
    return { nextMs: (ms) => fast.nextMs!.call(spec, ms), prevMs: (ms) => fast.prevMs!.call(spec, ms) };
  return {
    nextMs: (ms) => spec.next(new Date(ms))?.getTime() ?? Number.NaN,
    prevMs: (ms) => spec.prev(new Date(ms))?.getTime() ?? Number.NaN,
  };
}

/**
 * A spec's occurrences that pass every calendar window (`days`, `between`, `lastDayOfMonth`), read on the
 * spec's zone. Rejected candidates are skipped silently; after a rejection the search jumps to the next
 * local midnight or window edge where it can, so `every(1000)` restricted to one weekday stays cheap.
 */
export function timeline(spec: Spec, windows: readonly Window[]): Timeline {
  const base = baseTimeline(spec);
  if (windows.length === 0) return base;
  const zone = spec.timeZone;
  const allowed = (ms: number) => {
    const at = new Date(ms);
    for (const w of windows) if (!w.allows(at, zone)) return false;
    return true;
  };
  return {
    nextMs(afterMs) {
      let at = afterMs;
      for (let step = 0; step < MAX_SEARCH_STEPS; step++) {
        at = base.nextMs(at);
        if (Number.isNaN(at) || allowed(at)) return at;
        const jump = earliestAllowed(windows, at, zone);
        if (jump > at + 1) at = jump - 1;
      }
      return Number.NaN;
    },
    prevMs(beforeMs) {
      let at = beforeMs;
      for (let step = 0; step < MAX_SEARCH_STEPS; step++) {
        at = base.prevMs(at);
        if (Number.isNaN(at) || allowed(at)) return at;
      }
      return Number.NaN;
    },
  };
}

/** Local milliseconds since midnight, and the offset, of `utcMs` in `zone`. */
function local(utcMs: number, zone: string): { msOfDay: number; offset: number } {
  const offset = zoneOffsets(zone).offsetAt(utcMs);
  const localMs = utcMs + offset;
  return { msOfDay: localMs - Math.floor(localMs / DAY_MS) * DAY_MS, offset };
}

/**
 * An instant no later than the first one after `rejected` that the rejecting windows could allow: the
 * next local midnight for day windows, the next window edge for time-of-day windows. Conservative across
 * DST changes (it takes the earlier of the two offsets), so it never jumps over an allowed occurrence.
 */
function earliestAllowed(windows: readonly Window[], rejected: number, zone: string): number {
  const at = new Date(rejected);
  let jump = rejected;
  for (const w of windows) {
    if (w.allows(at, zone)) continue;
    const d = w.describe();
    const { msOfDay, offset } = local(rejected, zone);
    let ahead: number;
    if (d.kind === 'days' || d.kind === 'lastDayOfMonth') ahead = DAY_MS - msOfDay;
    else if (d.kind === 'between') ahead = (secondsOf(d.from) * 1000 - msOfDay + DAY_MS) % DAY_MS;
    else if (d.kind === 'unlessBetween') ahead = ((secondsOf(d.to) + 1) * 1000 - msOfDay + DAY_MS) % DAY_MS;
    else continue;
    const guess = rejected + ahead;
    const shifted = guess - (zoneOffsets(zone).offsetAt(guess) - offset);
    const target = Math.min(guess, shifted) - 1;
    // Every rejecting window must allow the target; the tightest bound is the latest jump among them.
    if (target > jump) jump = target;
  }
  return jump;
}

function secondsOf(hhmmss: string): number {
  const [h = 0, m = 0, s = 0] = hhmmss.split(':').map(Number);
  return h * 3600 + m * 60 + s;
}

/** One occurrence to run. */
export interface Candidate {
  at: number;
  origin: Origin;
}

/** Several occurrences folded into one record. */
export interface Folded {
  /** The latest instant of the group. */
  latest: number;
  count: number;
  /** True when counting stopped at {@link MAX_STEPS}: there were at least `count`. */
  capped: boolean;
}

export interface AdmissionPlan {
  /** Older than the horizon and newer than what was decided before: skipped as `missed`. */
  missed?: Folded;
  /** Inside the catch-up window but beyond `catchUp.max`: skipped as one `backlog_limited` record. */
  backlog?: Folded;
  /** To run, oldest first. */
  run: Candidate[];
  /** Every occurrence at or before this instant has been decided by this plan (or earlier). */
  through: number;
}

/** A declaration's catch-up policy, as the planner reads it. */
export interface CatchUpPolicy {
  window: number;
  max: number;
  /** Whether a first start (no cursor) catches up too; see {@link firstStartCursor}. */
  onFirstStart?: boolean;
}

export interface PlanInput {
  timeline: Timeline;
  /** Occurrences at or before this were decided earlier (the cursor, or {@link firstStartCursor}). */
  decidedThrough: number;
  now: number;
  grace: number;
  catchUp?: CatchUpPolicy | undefined;
  /** Run at most this many now; the rest wait for the next plan. */
  limit: number;
}

/**
 * Plans the occurrences in `(decidedThrough, now]`. Occurrences within `grace` of `now` run on time
 * (`scheduled`). Without `catchUp`, older ones are `missed`. With it, the most recent `max` within
 * `window` run oldest first (`catch_up` when older than `grace`), earlier ones in the window form one
 * `backlog_limited` record, and ones older than the window are `missed`.
 */
export function planAdmission(input: PlanInput): AdmissionPlan {
  const { timeline: tl, decidedThrough, now, grace, limit, catchUp } = input;
  const horizon = catchUp ? Math.max(catchUp.window, grace) : grace;
  const recentAfter = now - horizon;
  const plan: AdmissionPlan = { run: [], through: now };

  let start = recentAfter;
  if (decidedThrough >= now) return { run: [], through: decidedThrough };
  if (decidedThrough < recentAfter) {
    const missed = fold(tl, decidedThrough, recentAfter);
    if (missed) plan.missed = missed;
  } else start = decidedThrough;

  const keep = catchUp ? catchUp.max : Number.POSITIVE_INFINITY;
  const kept: number[] = [];
  let dropped = 0;
  let droppedLatest = Number.NaN;
  let at = start;
  for (let step = 0; step < MAX_STEPS; step++) {
    at = tl.nextMs(at);
    if (Number.isNaN(at) || at > now) break;
    if (!catchUp && kept.length >= limit) {
      plan.through = kept[kept.length - 1] as number;
      break;
    }
    kept.push(at);
    if (kept.length > keep) {
      droppedLatest = kept.shift() as number;
      dropped++;
    }
  }
  if (dropped > 0) plan.backlog = { latest: droppedLatest, count: dropped, capped: false };
  let runs = kept;
  if (runs.length > limit) {
    runs = kept.slice(0, limit);
    plan.through = runs[runs.length - 1] as number;
  }
  plan.run = runs.map((t) => ({ at: t, origin: now - t > grace ? 'catch_up' : 'scheduled' }));
  return plan;
}

export interface FirstStartInput {
  timeline: Timeline;
  /** When the scheduler started: its first clock reading. */
  startedAt: number;
  now: number;
  grace: number;
  catchUp?: CatchUpPolicy | undefined;
}

/**
 * Where a schedule that has no cursor (a first start: a new deployment, a new declaration, a cursor
 * forgotten after its TTL) begins: an instant such that the occurrences after it are planned as usual and
 * none at or before it is ever run or reported. A first start has no history, so it neither replays nor
 * reports one:
 *
 * - By default the cursor starts just before the later of `startedAt` and `now - grace`: only occurrences
 *   due since the scheduler started, and within `grace`, run. An occurrence due before the scheduler
 *   started never runs, whatever `grace` is; one due since but older than `grace` (leadership came late,
 *   as for a replica that stood by while another led) is not reported as missed either, since another
 *   replica may have run it.
 * - With `catchUp.onFirstStart`, the cursor starts just before the most recent `catchUp.max` occurrences
 *   within the catch-up window (`max(window, grace)`), before and after `startedAt` alike: they run oldest
 *   first (`catch_up` when older than `grace`), and nothing older is run or reported.
 *
 * The scheduler persists the result as the cursor at once, so that a leader taking over after a crash
 * re-examines what this first start admitted instead of starting afresh.
 */
export function firstStartCursor(input: FirstStartInput): number {
  const { timeline: tl, startedAt, now, grace, catchUp } = input;
  if (catchUp?.onFirstStart) {
    const after = now - Math.max(catchUp.window, grace);
    let oldest = Number.NaN;
    let at = now + 1;
    for (let kept = 0; kept < catchUp.max; kept++) {
      const prev = tl.prevMs(at);
      if (Number.isNaN(prev) || prev <= after) break;
      oldest = prev;
      at = prev;
    }
    return justBefore(tl, Number.isNaN(oldest) ? after + 1 : oldest);
  }
  return justBefore(tl, Math.max(startedAt, now - grace + 1));
}

/** The last occurrence strictly before `instant`, or `instant - 1` when there is none. */
function justBefore(tl: Timeline, instant: number): number {
  const prev = tl.prevMs(instant);
  return Number.isNaN(prev) ? instant - 1 : prev;
}

/** Counts the occurrences in `(after, through]` (up to {@link MAX_STEPS}) and finds the latest. */
function fold(tl: Timeline, after: number, through: number): Folded | undefined {
  let count = 0;
  let latest = Number.NaN;
  let at = after;
  for (; count < MAX_STEPS; count++) {
    const next = tl.nextMs(at);
    if (Number.isNaN(next) || next > through) break;
    latest = next;
    at = next;
  }
  if (count === 0) return undefined;
  const capped = count >= MAX_STEPS;
  if (capped) {
    const last = tl.prevMs(through + 1);
    if (!Number.isNaN(last)) latest = last;
  }
  return { latest, count, capped };
}
