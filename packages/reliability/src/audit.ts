import type { Schedule } from '@duetime/core';
import type { History, PutOp } from './driver.js';
import type { Delivery } from './effects.js';

/** What the audit compares: the driver's history against the durable effects and what is left pending. */
export interface AuditInput {
  history: History;
  /** Deliveries per driver key (the events of `fx/<key>`). */
  deliveries: Map<string, Delivery[]>;
  /** Every schedule still active after the final drain, by key. */
  pending: Map<string, Schedule>;
  /** When the final drain finished: a schedule due by then and still pending is stuck. */
  drainedAt: number;
  /** Calendar ticks: deliveries and storeTarget marks per grid instant, when the run had a scheduler. */
  ticks?: TickInput;
  /** On SQL backends: every application row as `stream ref`; must match the events one for one. */
  rows?: string[];
}

export interface TickInput {
  /** The scheduler's grid, in order: every instant that may have an occurrence. */
  instants: { at: number; occurrence: string; deliveries: Delivery[]; marks: number }[];
  /** Occurrences the scheduler itself reported as failed or cancelled (seen in its history). */
  reported?: Set<string>;
}

export interface AuditFigures {
  /** Puts the driver made (schedules added or replaced). */
  schedules: number;
  keys: number;
  /** Puts delivered (once). */
  delivered: number;
  /** Superseded puts that were delivered before their replacement or cancellation committed. */
  deliveredBeforeSuperseded: number;
  /** Operations whose transaction threw (they may or may not have committed). */
  uncertain: number;
  /** Keys whose final committed put was never delivered (or, for a far-future put, is not pending). */
  lost: number;
  /** The committed puts counted in `lost` (to place each loss in time). */
  lostPuts: PutOp[];
  /** Puts (or ticks) whose effect committed more than once. */
  duplicated: number;
  /** Schedules due before the drain finished and still pending. */
  stuck: number;
  /** Deliveries of something that was never scheduled, or of a far-future put. */
  unexpected: number;
  /** SQL backends: rows and events disagree (a delivery's writes did not commit together). */
  torn: number;
  ticks: number;
  ticksLost: number;
  ticksDuplicated: number;
  /** Ticks missing but reported failed by the scheduler (visible, not silent). */
  ticksReported: number;
  /** The first problems found, for the failure message. */
  problems: string[];
}

const MAX_PROBLEMS = 25;

/**
 * Derives the expected effects from the committed history and compares them with the durable ones.
 *
 * For each key, with its operations in commit order: a put superseded by a later committed operation may
 * have been delivered before that operation committed, so it is delivered at most once. The last
 * committed operation decides the rest: a put must be delivered exactly once (a far-future put must
 * still be pending, undelivered); a cancel leaves nothing. Operations after it whose transaction threw
 * may or may not have committed: each of their puts at most once, and, unless one of them is a cancel,
 * at least one put from the last committed one on must be delivered.
 */
export function audit(input: AuditInput): AuditFigures {
  const f: AuditFigures = {
    schedules: input.history.puts.size,
    keys: input.history.byKey.size,
    delivered: 0,
    deliveredBeforeSuperseded: 0,
    uncertain: 0,
    lost: 0,
    lostPuts: [],
    duplicated: 0,
    stuck: 0,
    unexpected: 0,
    torn: 0,
    ticks: 0,
    ticksLost: 0,
    ticksDuplicated: 0,
    ticksReported: 0,
    problems: [],
  };
  const problem = (text: string) => {
    if (f.problems.length < MAX_PROBLEMS) f.problems.push(text);
  };

  for (const [key, ops] of input.history.byKey) {
    const delivered = input.deliveries.get(key) ?? [];
    const count = new Map<string, number>();
    const versions = new Map<string, number[]>();
    for (const d of delivered) {
      const put = d.put === undefined ? undefined : input.history.puts.get(d.put);
      if (!put || put.key !== key) {
        f.unexpected++;
        problem(`${key}: a delivery of ${JSON.stringify(d.put)}, which the driver never scheduled here`);
        continue;
      }
      count.set(put.put, (count.get(put.put) ?? 0) + 1);
      versions.set(put.put, [...(versions.get(put.put) ?? []), d.version]);
    }
    for (const [put, n] of count) {
      if (n > 1) {
        f.duplicated++;
        // The same version twice is a consumption that did not hold; two versions, a put stored twice.
        problem(`${key}: put ${put} delivered ${n} times (versions ${versions.get(put)?.join(', ')})`);
      }
    }
    f.uncertain += ops.filter((op) => op.outcome === 'uncertain').length;
    let lastCommitted = -1;
    for (let i = ops.length - 1; i >= 0; i--)
      if (ops[i]?.outcome === 'committed') {
        lastCommitted = i;
        break;
      }
    const trailing = ops.slice(lastCommitted + 1);
    const decisive = lastCommitted >= 0 ? ops[lastCommitted] : undefined;
    const superseded = ops
      .slice(0, Math.max(0, lastCommitted))
      .filter((op): op is PutOp => op.kind === 'put');
    for (const op of superseded) if (count.has(op.put)) f.deliveredBeforeSuperseded++;
    const candidates: PutOp[] = [];
    if (decisive?.kind === 'put') candidates.push(decisive);
    for (const op of trailing) if (op.kind === 'put') candidates.push(op);
    const far = candidates.filter((op) => op.at > input.drainedAt);
    for (const op of far)
      if (count.has(op.put)) {
        f.unexpected++;
        problem(`${key}: put ${op.put}, due ${new Date(op.at).toISOString()}, was delivered early`);
      }
    const deliveredCandidates = candidates.filter((op) => count.has(op.put)).length;
    f.delivered += [...count.keys()].length;
    if (trailing.length === 0) {
      if (decisive?.kind !== 'put') continue;
      if (decisive.at > input.drainedAt) {
        const pending = input.pending.get(key);
        const pendingPut = (pending?.message.data as { put?: string } | undefined)?.put;
        if (pendingPut !== decisive.put) {
          f.lost++;
          f.lostPuts.push(decisive);
          problem(`${key}: far-future put ${decisive.put} is not pending (found ${pendingPut ?? 'nothing'})`);
        }
      } else if (!count.has(decisive.put)) {
        f.lost++;
        f.lostPuts.push(decisive);
        problem(
          `${key}: final put ${decisive.put} (due ${new Date(decisive.at).toISOString()}) never delivered`,
        );
      }
      continue;
    }
    // A lower bound only when the last committed operation is a put: after a committed cancel (or with
    // nothing committed), the uncertain puts may all have failed, and then nothing is due.
    const bounded = decisive?.kind === 'put' && !trailing.some((op) => op.kind === 'cancel');
    const due = candidates.filter((op) => op.at <= input.drainedAt);
    if (bounded && far.length === 0 && due.length > 0 && deliveredCandidates === 0) {
      const pending = input.pending.get(key);
      if (!pending) {
        f.lost++;
        if (decisive?.kind === 'put') f.lostPuts.push(decisive);
        problem(`${key}: none of the puts ${due.map((op) => op.put).join(', ')} was delivered`);
      }
    }
  }

  for (const [key, schedule] of input.pending) {
    if (schedule.dueAt.getTime() <= input.drainedAt) {
      f.stuck++;
      problem(`${key}: due ${schedule.dueAt.toISOString()} and still pending (version ${schedule.version})`);
    }
  }

  if (input.ticks) auditTicks(input.ticks, f, problem);

  if (input.rows) {
    const fromEvents = new Map<string, number>();
    for (const [key, list] of input.deliveries)
      for (const d of list) bump(fromEvents, `fx/${key} ${d.put ?? ''}`);
    for (const tick of input.ticks?.instants ?? [])
      for (const d of tick.deliveries) bump(fromEvents, `tick/${tick.occurrence} ${d.occurrence ?? ''}`);
    const fromRows = new Map<string, number>();
    for (const row of input.rows) bump(fromRows, row);
    for (const [ref, n] of fromRows) {
      if (fromEvents.get(ref) !== n) {
        f.torn++;
        problem(`rows and events disagree on ${ref}: ${n} rows, ${fromEvents.get(ref) ?? 0} events`);
      }
    }
    for (const [ref, n] of fromEvents) {
      if (!fromRows.has(ref)) {
        f.torn++;
        problem(`rows and events disagree on ${ref}: 0 rows, ${n} events`);
      }
    }
  }
  return f;
}

function auditTicks(ticks: TickInput, f: AuditFigures, problem: (text: string) => void): void {
  const ran = ticks.instants.filter((t) => t.deliveries.length > 0 || t.marks > 0);
  const first = ran[0]?.at;
  const last = ran.at(-1)?.at;
  if (first === undefined || last === undefined) return;
  for (const tick of ticks.instants) {
    if (tick.at < first || tick.at > last) continue;
    f.ticks++;
    if (tick.deliveries.length > 1 || tick.marks > 1) {
      f.ticksDuplicated++;
      problem(
        `tick ${new Date(tick.at).toISOString()} (${tick.occurrence}): ${tick.deliveries.length} deliveries, ${tick.marks} marks`,
      );
    }
    if (tick.deliveries.length === 0) {
      if (ticks.reported?.has(tick.occurrence)) f.ticksReported++;
      else {
        f.ticksLost++;
        problem(
          `tick ${new Date(tick.at).toISOString()} (${tick.occurrence}) never delivered (marks: ${tick.marks})`,
        );
      }
    }
  }
}

function bump(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

/** One line of figures, for the test output and the results file. */
export function describeFigures(
  label: string,
  f: AuditFigures,
  extra: Record<string, number | string> = {},
): string {
  const parts = Object.entries({
    schedules: f.schedules,
    delivered: f.delivered,
    ...extra,
    lost: f.lost,
    duplicated: f.duplicated,
    stuck: f.stuck,
    unexpected: f.unexpected,
    torn: f.torn,
    uncertain: f.uncertain,
    'delivered before superseded': f.deliveredBeforeSuperseded,
    ticks: f.ticks,
    'ticks lost': f.ticksLost,
    'ticks duplicated': f.ticksDuplicated,
    'ticks reported failed': f.ticksReported,
  }).map(([k, v]) => `${k} ${v}`);
  return `${label}: ${parts.join(', ')}`;
}
