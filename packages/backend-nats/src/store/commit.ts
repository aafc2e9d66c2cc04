import { setTimeout as sleep } from 'node:timers/promises';
import { BackendError, ConflictError } from '@duetime/core';
import { type BatchMessage, type NatsIo, uniqueId } from '../io.js';
import type { Layout } from '../layout.js';
import { TransactionTooLargeError } from './limits.js';
import { type Expectation, type Group, type GroupPlan, planGroups } from './plan.js';

/**
 * Turns groups of store operations into messages of one atomic batch publish, and publishes them.
 *
 * Each group is all or nothing, independently of the others (a delivery's parts; a plain transaction is
 * one group). The messages of every group go into one atomic batch (several when they exceed the server's
 * batch size, split between groups), so a delivery batch is one round trip and one commit on the server.
 *
 * Preconditions are JetStream's own compare-and-set, `Nats-Expected-Last-Subject-Sequence`, on the
 * messages that need one:
 * - consuming a claimed schedule writes its tombstone expecting the record's sequence at claim time;
 * - recording a failed attempt rewrites the record expecting the same (when the record moved on, the
 *   failure is dropped: the schedule was replaced meanwhile);
 * - appending an event writes `e.<aggregate>.<n>` expecting no message there (0);
 * - a put with `ifVersion` writes the record expecting the sequence of the record at that version.
 * A batch whose expectation fails is refused whole; the groups whose preconditions no longer hold are
 * found by reading those subjects again, left out (reported as conflicts), and the batch published again.
 *
 * Every record written (a put, a failed attempt, a recurrence's next occurrence) comes with its timer
 * (`t.<key>`, a JetStream message schedule), in the same batch; see plan.ts.
 */

export interface CommitContext {
  io: NatsIo;
  layout: Layout;
  versionBase: number;
  /**
   * The most messages one atomic batch holds: the backend's `atomicBatchLimit`, lowered to the server's
   * own ceiling when the server refuses a batch as too large.
   */
  maxBatch: number;
  /** How long before its due time a schedule's timer fires (the fires consumer holds it until then). */
  fireAheadMs: number;
}

export interface CommitOutcome {
  /** Per group: undefined when applied, else why it was left out (a conflict, or a batch too large). */
  results: (Error | undefined)[];
  /** Per group: the earliest due time among the records it wrote, when applied. */
  earliest: (number | undefined)[];
}

/** Commits independent groups; see the module comment. */
export async function commitGroups(c: CommitContext, groups: readonly Group[]): Promise<CommitOutcome> {
  const plans = await planGroups(c, groups, (plan) => tooLarge(c, plan));
  const results: (Error | undefined)[] = plans.map((p) => p.conflict);
  // Groups are published in order, in chunks that fit one atomic batch.
  let start = 0;
  while (start < plans.length) {
    const chunk: number[] = [];
    let size = 0;
    for (let i = start; i < plans.length; i++) {
      const plan = plans[i] as GroupPlan;
      const n = plan.conflict ? 0 : plan.messages.length;
      if (chunk.length > 0 && size + n > room(c)) break;
      chunk.push(i);
      size += n;
    }
    start = chunk.at(-1)! + 1;
    await publishChunk(c, plans, chunk, results);
  }
  return {
    results,
    earliest: plans.map((p, i) => (results[i] ? undefined : p.earliest)),
  };
}

/**
 * Group commit: commits submitted while a batch is on its way wait for it and then go together, as the
 * groups of one batch (each still all or nothing on its own). One batch costs the server about the same
 * whatever its size, so concurrent transactions of one process share that cost.
 */
export class Committer {
  readonly #c: CommitContext;
  #waiting: {
    groups: readonly Group[];
    resolve: (o: CommitOutcome) => void;
    reject: (e: unknown) => void;
  }[] = [];
  #busy = false;

  constructor(context: CommitContext) {
    this.#c = context;
  }

  commit(groups: readonly Group[]): Promise<CommitOutcome> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ groups, resolve, reject });
      if (!this.#busy) void this.#run();
    });
  }

  async #run(): Promise<void> {
    this.#busy = true;
    try {
      while (this.#waiting.length > 0) {
        const batch = this.#waiting;
        this.#waiting = [];
        try {
          const outcome = await commitGroups(
            this.#c,
            batch.flatMap((b) => b.groups),
          );
          let at = 0;
          for (const b of batch) {
            const n = b.groups.length;
            b.resolve({
              results: outcome.results.slice(at, at + n),
              earliest: outcome.earliest.slice(at, at + n),
            });
            at += n;
          }
        } catch (error) {
          for (const b of batch) b.reject(error);
        }
      }
    } finally {
      this.#busy = false;
    }
  }
}

/**
 * Refuses a group whose messages alone exceed one atomic batch (see {@link TransactionTooLargeError}):
 * found while planning, before anything of the commit is published, and left out like a conflicting one.
 */
function tooLarge(c: CommitContext, plan: GroupPlan): TransactionTooLargeError | undefined {
  if (plan.messages.length <= room(c)) return undefined;
  // A subject written twice is sent once: count what would be sent.
  const messages = batchOf([plan], [0]);
  if (messages.length <= room(c)) return undefined;
  return new TransactionTooLargeError(recordCount(c, messages), messages.length + 1, c.maxBatch);
}

/** How many of `messages` write or cancel a schedule (its record, or the record's tombstone). */
function recordCount(c: CommitContext, messages: readonly BatchMessage[]): number {
  const records = `${c.layout.prefix}.s.`;
  return messages.filter((m) => m.subject.startsWith(records)).length;
}

/** Publishes the groups `indices` (those without a conflict) as one atomic batch, retrying conflicts. */
async function publishChunk(
  c: CommitContext,
  plans: GroupPlan[],
  indices: number[],
  results: (Error | undefined)[],
): Promise<void> {
  // Each attempt leaves out more groups; there are at most as many attempts as groups (plus one).
  for (let attempt = 0; attempt <= indices.length; attempt++) {
    const live = indices.filter((i) => results[i] === undefined);
    const messages = batchOf(plans, live);
    if (messages.length === 0) return;
    if (messages.length > room(c)) {
      // Not reached: planning refuses a group too large for one batch, and chunks are cut between groups.
      for (const i of live)
        results[i] = new TransactionTooLargeError(recordCount(c, messages), messages.length + 1, c.maxBatch);
      return;
    }
    const outcome = await publishOnce(c, messages);
    if (outcome === 'applied') return;
    // An expectation did not hold: find whose, leave those out, publish the rest.
    const expectations = live.flatMap((i) => plans[i]!.expectations);
    let failing = await failingExpectations(c, expectations);
    // On a replicated stream the read may be answered by a replica that has not yet applied what made the
    // leader refuse the batch: read again, a little later, before calling the refusal unexplained.
    for (let waitMs = 5; failing.size === 0 && waitMs <= 320; waitMs *= 2) {
      await sleep(waitMs);
      failing = await failingExpectations(c, expectations);
    }
    let progressed = false;
    for (const i of live) {
      const plan = plans[i] as GroupPlan;
      const bad = plan.expectations.filter((e) => failing.has(e));
      if (bad.length === 0) continue;
      progressed = true;
      const refusing = bad.find((e) => e.kind !== 'fail');
      if (refusing) {
        results[i] = conflictOf(refusing);
      } else {
        // A failure for a version that was replaced meanwhile: nothing to record.
        // A dropped record takes its timer along: the key's current timer stays.
        plan.messages = plan.messages.filter(
          (m) => !bad.some((e) => e.subject === m.subject || m.subject === c.layout.timer(e.key)),
        );
        plan.expectations = plan.expectations.filter((e) => !bad.includes(e));
        if (plan.messages.length === 0) plan.earliest = undefined;
      }
    }
    if (!progressed)
      throw new BackendError(
        'commit',
        'the server refused a batch for an expectation that still holds when read back; try again',
        { transient: true },
      );
  }
  throw new BackendError('commit', 'a batch kept conflicting', { transient: true });
}

/**
 * Publishes one batch. Its first message, a commit marker (`d`) carrying a fresh `Nats-Msg-Id`, makes
 * retries after a lost reply safe: a batch that was stored is refused as a duplicate (checked before any
 * expectation), which counts as applied. The id could ride on the batch's own first message, but the
 * server rebuilds its duplicate table on restart from the messages it still holds: once that message was
 * rolled up (the schedule consumed or replaced), a retry reaching a restarted server would be stored again
 * (test/dedup-restart.test.ts). The marker stays for the duplicate window (`Nats-TTL`), then expires.
 */
async function publishOnce(c: CommitContext, messages: BatchMessage[]): Promise<'applied' | 'conflict'> {
  const id = uniqueId();
  const marker = {
    subject: c.layout.commits,
    data: '',
    headers: { 'Nats-Msg-Id': id, 'Nats-TTL': MARKER_TTL },
  };
  const batch = [marker, ...messages];
  const deadline = performance.now() + c.io.commitTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      const result = await c.io.atomicPublish(batch);
      if (result.kind === 'conflict') return 'conflict';
      return 'applied';
    } catch (error) {
      // The reply was lost (timeout, reconnect): send the same batch again; the server tells whether
      // it was stored. Other failures, and a connection that stays away, end the commit.
      const ceiling = serverCeiling(error);
      if (ceiling !== undefined) {
        // Configured above the server's own ceiling: refused whole, nothing stored. Keep to the server's
        // from now on.
        c.maxBatch = Math.min(c.maxBatch, ceiling);
        throw new TransactionTooLargeError(recordCount(c, messages), messages.length + 1, ceiling);
      }
      if (!(error instanceof BackendError) || !error.transient || c.io.closed || performance.now() > deadline)
        throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 50 * 2 ** attempt)));
    }
  }
}

/** The server's atomic batch ceiling, when `error` is its refusal of a batch as too large. */
function serverCeiling(error: unknown): number | undefined {
  const match = /atomic publish batch is too large: (\d+)/.exec(String((error as Error)?.message ?? ''));
  return match ? Number(match[1]) : undefined;
}

function conflictOf(e: Expectation): ConflictError {
  const key = JSON.stringify(e.key);
  if (e.kind === 'aggregate') return new ConflictError('aggregate', e.key, `aggregate ${key} moved on`);
  if (e.kind === 'version')
    return new ConflictError('version', e.key, `schedule ${key} changed since it was read`);
  return new ConflictError('schedule', e.key, `schedule ${key} changed after it was claimed`);
}

/** The expectations among `expectations` that no longer hold on the server. */
async function failingExpectations(
  c: CommitContext,
  expectations: readonly Expectation[],
): Promise<Set<Expectation>> {
  const current = await c.io.lastOf(c.layout.storeStream, [...new Set(expectations.map((e) => e.subject))]);
  return new Set(expectations.filter((e) => (current.get(e.subject)?.seq ?? 0) !== e.expected));
}

/**
 * The messages of the groups `indices`. A subject written more than
 * once keeps only its last write (a batch may roll a subject up once), which takes over the expectation
 * of the first (an expectation is only ever on a subject's first write in a batch: see planGroups).
 */
function batchOf(plans: readonly GroupPlan[], indices: readonly number[]): BatchMessage[] {
  const messages = indices.flatMap((i) => plans[i]!.messages);
  if (messages.length === 0) return [];
  const lastWrite = new Map<string, number>();
  for (const [i, m] of messages.entries()) lastWrite.set(m.subject, i);
  const expectations = new Map<string, string>();
  for (const m of messages) {
    const expected = m.headers?.[EXPECTED];
    if (expected !== undefined && !expectations.has(m.subject)) expectations.set(m.subject, expected);
  }
  return messages.flatMap((m, i) => {
    if (lastWrite.get(m.subject) !== i) return [];
    const expected = expectations.get(m.subject);
    if (expected === undefined || m.headers?.[EXPECTED] === expected) return [m];
    return [{ ...m, headers: { ...m.headers, [EXPECTED]: expected } }];
  });
}

const EXPECTED = 'Nats-Expected-Last-Subject-Sequence';

/** How long a commit marker is kept: the store stream's duplicate window (120 s) and a margin. */
const MARKER_TTL = '130s';

/** The most messages of the transaction's own one batch holds: the commit marker takes one. */
const room = (c: CommitContext): number => c.maxBatch - 1;
