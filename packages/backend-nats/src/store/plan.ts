import {
  ConflictError,
  type DeadLetterRecord,
  type Event,
  type Message,
  type Schedule,
  type StoredState,
  stateOf,
} from '@duetime/core';
import { type BatchMessage, ROLLUP, uniqueId } from '../io.js';
import { atSchedule, H } from '../jetstream-scheduler/headers.js';
import type { Layout } from '../layout.js';
import type { CommitContext } from './commit.js';
import {
  DELETED,
  encodeDeadLetter,
  encodeEvent,
  encodeRecord,
  isTombstone,
  type RecordValue,
  TOMBSTONE_TTL,
  toSchedule,
} from './records.js';

/**
 * Planning a commit: each group of store operations becomes the messages of an atomic batch and the
 * expectations (`Nats-Expected-Last-Subject-Sequence`) they carry; see commit.ts.
 */

/** What one group of a commit does, in order (the contract's writes and settlements, as messages). */
export type StoreOp =
  | { op: 'append'; aggregateId: string; expectedSequence: number; events: readonly Event[] }
  | {
      op: 'put';
      key: string;
      at: Date;
      dueAt?: Date;
      message: Message;
      recurrence?: StoredState;
      ifVersion?: number;
    }
  /** A put that applies only when `key` has no active schedule at that point (what comes next). */
  | { op: 'rearm'; key: string; at: Date; dueAt?: Date; message: Message; recurrence?: StoredState }
  | { op: 'delete'; key: string }
  | { op: 'deletePrefix'; prefix: string }
  | { op: 'consume'; key: string; version: number }
  /** Records a failed attempt on `key` when it is still at `version` (no-op, not a conflict, otherwise). */
  | { op: 'fail'; key: string; version: number; attempts: number; dueAt: Date; error: string; at?: Date }
  /** Keeps a dead letter under its key, replacing an older one. */
  | { op: 'dead'; record: DeadLetterRecord }
  | { op: 'deleteDead'; key: string };

export interface Expectation {
  subject: string;
  expected: number;
  /** Whose precondition it is: a group is refused, a failure record only dropped. */
  kind: 'schedule' | 'aggregate' | 'version' | 'fail';
  key: string;
}

export interface GroupPlan {
  messages: BatchMessage[];
  expectations: Expectation[];
  /** Earliest due time of the records this group writes (for wake-ups). */
  earliest: number | undefined;
  /** Why the group cannot apply, found while planning: a conflict, or a refusal (a batch too large). */
  conflict?: Error;
}

/** A claimed schedule's record, as the delivery read it. */
export interface Claim {
  schedule: Schedule;
  /** The stream sequence of the record message the claim read. */
  seq: number;
}

/** One group: its operations, and the claims of the delivery it belongs to (none for a transaction). */
export interface Group {
  ops: readonly StoreOp[];
  claims: ReadonlyMap<string, Claim>;
}

const TOMBSTONE = { ...ROLLUP, 'Nats-TTL': TOMBSTONE_TTL, [DELETED]: '1' } as const;

/**
 * The timer of a record due at `due` whose id is `id`: a JetStream message schedule on `t.<key>` that fires
 * into `f.<key>` `lead` ms before `due` (the server fires on a 250 ms grid under load; the fires consumer
 * holds an early fire until its due instant). A new timer on the subject replaces a pending one. Its
 * headers are the JetStream scheduler's (`Duetime-Timer`, `Duetime-Due`), copied by the server to the fire.
 */
export function timerMessage(
  layout: Layout,
  key: string,
  due: number,
  id: string,
  lead: number,
): BatchMessage {
  return {
    subject: layout.timer(key),
    data: '',
    headers: {
      ...ROLLUP,
      [H.schedule]: atSchedule(due - lead),
      [H.scheduleTarget]: layout.fire(key),
      [H.timer]: id,
      [H.due]: String(due),
    },
  };
}

/**
 * Plans every group: reads what the operations need (prefix deletions, unclaimed consumptions). `refuse`
 * may turn a group's plan down (why, or undefined to keep it); a refused group is left out like a
 * conflicting one, and later groups do not see its writes.
 */
export async function planGroups(
  c: CommitContext,
  groups: readonly Group[],
  refuse: (plan: GroupPlan) => Error | undefined = () => undefined,
): Promise<GroupPlan[]> {
  const { layout } = c;
  // Keys whose records earlier groups of this batch write, and subjects written so far.
  const written = new Map<string, number>();
  const putKeys = new Set<string>();
  const plans: GroupPlan[] = [];
  for (const [index, { ops, claims }] of groups.entries()) {
    const plan: GroupPlan = { messages: [], expectations: [], earliest: undefined };
    const mine = new Set<string>();
    // Keys this group wrote so far (a put, a deletion): a version check after them cannot hold.
    const touched = new Set<string>();
    const record = (key: string, value: RecordValue, expected?: Expectation) => {
      const t = uniqueId();
      plan.messages.push(
        {
          subject: layout.record(key),
          data: encodeRecord({ ...value, t }),
          headers: expected
            ? { ...ROLLUP, 'Nats-Expected-Last-Subject-Sequence': String(expected.expected) }
            : ROLLUP,
        },
        timerMessage(layout, key, value.due, t, c.fireAheadMs),
      );
      if (expected) plan.expectations.push(expected);
      mine.add(key);
      if (plan.earliest === undefined || value.due < plan.earliest) plan.earliest = value.due;
    };
    const tombstone = (subject: string, expected?: Expectation) => {
      plan.messages.push({
        subject,
        data: '',
        headers: expected
          ? { ...TOMBSTONE, 'Nats-Expected-Last-Subject-Sequence': String(expected.expected) }
          : TOMBSTONE,
      });
      if (expected) plan.expectations.push(expected);
    };
    for (const op of ops) {
      switch (op.op) {
        case 'put': {
          let expected: Expectation | undefined;
          if (op.ifVersion !== undefined) {
            const seq = touched.has(op.key) ? undefined : await versionSeq(c, op.key, op.ifVersion);
            if (seq === undefined) {
              plan.conflict = new ConflictError(
                'version',
                op.key,
                `schedule ${JSON.stringify(op.key)} is no longer at version ${op.ifVersion}`,
              );
              break;
            }
            expected = { subject: layout.record(op.key), expected: seq, kind: 'version', key: op.key };
          }
          record(op.key, fresh(op), expected);
          touched.add(op.key);
          break;
        }
        case 'rearm':
          // The processor (or an earlier part) scheduled the key: that schedule wins.
          if (mine.has(op.key) || putKeys.has(op.key)) break;
          record(op.key, fresh(op));
          break;
        case 'delete':
          tombstone(layout.record(op.key));
          tombstone(layout.timer(op.key));
          mine.delete(op.key);
          touched.add(op.key);
          break;
        case 'deletePrefix': {
          const keys = new Set(await liveKeysUnder(c, op.prefix));
          for (const key of [...putKeys, ...mine]) if (key.startsWith(op.prefix)) keys.add(key);
          for (const key of keys) {
            tombstone(layout.record(key));
            tombstone(layout.timer(key));
            mine.delete(key);
            touched.add(key);
          }
          break;
        }
        case 'consume': {
          const seq = await claimedSeq(c, claims, op.key, op.version);
          if (seq === undefined) {
            plan.conflict = new ConflictError(
              'schedule',
              op.key,
              `schedule ${JSON.stringify(op.key)} is not at version ${op.version}`,
            );
            break;
          }
          tombstone(layout.record(op.key), {
            subject: layout.record(op.key),
            expected: seq,
            kind: 'schedule',
            key: op.key,
          });
          break;
        }
        case 'fail': {
          const claim = claims.get(op.key);
          if (!claim || claim.schedule.version !== op.version) break;
          const s = claim.schedule;
          const at = op.at ?? s.at;
          const state = stateOf(s);
          record(
            op.key,
            {
              at: at.getTime(),
              due: op.dueAt.getTime(),
              m: s.message,
              n: op.attempts,
              e: op.error,
              ...(state ? { r: state } : {}),
              v: op.version,
            },
            { subject: layout.record(op.key), expected: claim.seq, kind: 'fail', key: op.key },
          );
          break;
        }
        case 'append':
          op.events.forEach((event, i) => {
            const subject = layout.event(op.aggregateId, op.expectedSequence + i + 1);
            plan.messages.push({
              subject,
              data: encodeEvent(event),
              headers: { 'Nats-Expected-Last-Subject-Sequence': '0' },
            });
            plan.expectations.push({ subject, expected: 0, kind: 'aggregate', key: op.aggregateId });
          });
          break;
        case 'dead':
          plan.messages.push({
            subject: layout.deadLetter(op.record.key),
            data: encodeDeadLetter(op.record),
            headers: ROLLUP,
          });
          break;
        case 'deleteDead':
          tombstone(layout.deadLetter(op.key));
          break;
      }
      if (plan.conflict) break;
    }
    // An expectation on a subject an earlier group of this batch writes cannot hold: that group's write
    // comes first in the stream.
    if (!plan.conflict) {
      const clash = plan.expectations.find((e) => written.has(e.subject));
      if (clash && clash.kind !== 'fail')
        plan.conflict = new ConflictError(
          clash.kind,
          clash.key,
          `${clash.key} was changed by an earlier part of this batch`,
        );
      else if (clash) {
        plan.messages = plan.messages.filter(
          (m) => m.subject !== clash.subject && m.subject !== layout.timer(clash.key),
        );
        plan.expectations = plan.expectations.filter((e) => e !== clash);
      }
    }
    if (!plan.conflict) plan.conflict = refuse(plan);
    if (plan.conflict) {
      plan.messages = [];
      plan.expectations = [];
      plan.earliest = undefined;
    } else {
      for (const m of plan.messages) written.set(m.subject, index);
      for (const key of mine) putKeys.add(key);
    }
    plans.push(plan);
  }
  return plans;
}

/** A new version's record. */
function fresh(op: { at: Date; dueAt?: Date; message: Message; recurrence?: StoredState }): RecordValue {
  return {
    at: op.at.getTime(),
    due: (op.dueAt ?? op.at).getTime(),
    m: op.message,
    n: 0,
    ...(op.recurrence !== undefined ? { r: op.recurrence } : {}),
  };
}

/** The sequence of `key`'s record when it is at `version`, else undefined. */
async function versionSeq(c: CommitContext, key: string, version: number): Promise<number | undefined> {
  const m = await c.io.last(c.layout.storeStream, c.layout.record(key));
  if (!m) return undefined;
  return toSchedule(key, m, c.versionBase)?.version === version ? m.seq : undefined;
}

/** The record sequence a consumption expects: the claim's, or (outside a delivery) the current record's. */
async function claimedSeq(
  c: CommitContext,
  claims: ReadonlyMap<string, Claim>,
  key: string,
  version: number,
): Promise<number | undefined> {
  const claim = claims.get(key);
  if (claim) return claim.schedule.version === version ? claim.seq : undefined;
  const m = await c.io.last(c.layout.storeStream, c.layout.record(key));
  if (!m) return undefined;
  const s = toSchedule(key, m, c.versionBase);
  return s?.version === version ? m.seq : undefined;
}

/** Keys with a live record under `prefix`, as of now. */
export async function liveKeysUnder(
  c: Pick<CommitContext, 'io' | 'layout'>,
  prefix: string,
): Promise<string[]> {
  const keys: string[] = [];
  for await (const m of c.io.scan(c.layout.storeStream, c.layout.recordFilter(prefix))) {
    if (isTombstone(m)) continue;
    const key = c.layout.keyOfRecord(m.subject);
    if (key.startsWith(prefix)) keys.push(key);
  }
  return keys;
}
