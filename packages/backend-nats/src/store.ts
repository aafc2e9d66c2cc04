import {
  BackendError,
  ConflictError,
  CorruptDataError,
  createBufferedTransaction,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  isTransient,
  type Logger,
  type Schedule,
  type StoreDriver,
  type StoreOp,
} from '@duetime/core';
import type { Subscription } from '@nats-io/transport-node';
import type { NatsIo } from './io.js';
import type { Layout } from './layout.js';
import { COMMIT_VOID_AFTER_MS, type CommitLog } from './log.js';
import type { ServerClock } from './server-clock.js';
import type { AppliedState, Materialiser } from './state/materialiser.js';
import { dueSchedules, listingDigest, listSchedules, nextDueAt } from './state/queries.js';
import { type NodeCache, Snapshot, StaleSnapshot } from './state/snapshot.js';
import type { AggregateHead, Entry, EntryOp, EntryReads, ListRead, RecordValue } from './state/types.js';

export interface StoreHooks {
  /** Called after a transaction is appended to the log, before it is materialised. */
  afterAppend?(seq: number): void | Promise<void>;
}

export interface NatsStoreContext {
  io: NatsIo;
  layout: Layout;
  log: CommitLog;
  materialiser: Materialiser;
  cache: NodeCache;
  logger: Logger;
  /** Identifies this backend instance in wake-up messages (its own are ignored). */
  origin: string;
  commitTimeoutMs: number;
  /** Stamps each commit's deadline in server time, so a skewed client clock cannot void commits. */
  serverClock: ServerClock;
  hooks?: StoreHooks;
}

function toSchedule(r: RecordValue): Schedule {
  return {
    key: r.key,
    at: new Date(r.at),
    message: r.message,
    version: r.version,
    attempts: r.attempts,
    dueAt: new Date(r.dueAt),
  };
}

/** The snapshot a transaction reads from, taken at its first read. */
interface SharedSnapshot {
  snapshot?: Snapshot;
}

/** What a transaction read from committed state, kept to be validated where it lands in the log. */
class ReadSet {
  readonly schedules = new Map<string, number>();
  readonly aggregates = new Map<string, number>();
  readonly listings: ListRead[] = [];

  note<K>(map: Map<K, number>, key: K, value: number, what: string): void {
    const seen = map.get(key);
    if (seen !== undefined && seen !== value)
      throw new ConflictError('serialization', what, `${what} changed while the transaction read it`);
    map.set(key, value);
  }

  /** The reads worth checking: those not already implied by an operation's own precondition. */
  toEntry(ops: EntryOp[]): EntryReads | undefined {
    const consumed = new Map(ops.flatMap((o) => (o.op === 'consume' ? [[o.key, o.version] as const] : [])));
    const appended = new Map(ops.flatMap((o) => (o.op === 'append' ? [[o.id, o.expect] as const] : [])));
    const s = [...this.schedules].filter(([k, v]) => consumed.get(k) !== v);
    const a = [...this.aggregates].filter(([k, v]) => appended.get(k) !== v);
    if (s.length === 0 && a.length === 0 && this.listings.length === 0) return undefined;
    return {
      ...(s.length ? { s } : {}),
      ...(a.length ? { a } : {}),
      ...(this.listings.length ? { l: this.listings } : {}),
    };
  }
}

function toEntryOp(op: StoreOp): EntryOp {
  switch (op.op) {
    case 'append':
      return { op: 'append', id: op.aggregateId, expect: op.expectedSequence, events: op.events };
    case 'put':
      return { op: 'put', key: op.key, at: op.at.getTime(), message: op.message };
    default:
      return op;
  }
}

/**
 * The store driver: reads answer from a snapshot of the materialised state taken after the log is
 * applied up to its head; a commit appends one entry to the log and waits for its outcome.
 */
export class NatsStoreDriver implements StoreDriver<undefined> {
  readonly #c: NatsStoreContext;
  readonly #subscriptions = new Set<Subscription>();

  constructor(context: NatsStoreContext) {
    this.#c = context;
  }

  async begin(): Promise<DriverTransaction<undefined>> {
    const reads = new ReadSet();
    // Every read of the transaction comes from one snapshot (taken at its first read): a consistent view,
    // and one round trip less per read. Commit validates what was read against the latest state anyway.
    const shared: SharedSnapshot = {};
    return createBufferedTransaction({
      reads: {
        loadEvents: async (id) => {
          const events = await this.loadEvents(id, shared);
          reads.note(reads.aggregates, id, events.at(-1)?.sequence ?? 0, `aggregate ${JSON.stringify(id)}`);
          return events;
        },
        loadSchedule: async (key) => {
          const schedule = await this.loadSchedule(key, shared);
          reads.note(reads.schedules, key, schedule?.version ?? 0, `schedule ${JSON.stringify(key)}`);
          return schedule;
        },
        listSchedules: async (query) => {
          const page = await this.listSchedules(query, shared);
          reads.listings.push({
            ...(query.through ? { through: query.through.getTime() } : {}),
            ...(query.prefix !== undefined ? { prefix: query.prefix } : {}),
            ...(query.after ? { after: query.after } : {}),
            limit: query.limit,
            digest: listingDigest(page),
          });
          return page;
        },
      },
      commit: async (ops) => {
        const entryOps = ops.map(toEntryOp);
        const readSet = reads.toEntry(entryOps);
        await this.#commit({
          v: 1,
          tx: this.#c.log.newId(),
          exp: await this.#deadline(),
          ops: entryOps,
          ...(readSet ? { reads: readSet } : {}),
        });
      },
    });
  }

  /**
   * Runs `fn` on a fresh snapshot (or the transaction's `shared` one); starts again on a newer snapshot
   * when the state moved on under it.
   */
  async #read<T>(
    operation: string,
    fn: (snapshot: Snapshot) => Promise<T>,
    shared?: SharedSnapshot,
  ): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        let snapshot = shared?.snapshot;
        if (!snapshot) {
          const state = await this.#c.materialiser.current();
          snapshot = new Snapshot(this.#c.io, this.#c.layout, state.meta, state.seq, this.#c.cache);
          if (shared) shared.snapshot = snapshot;
        }
        return await fn(snapshot);
      } catch (error) {
        if (shared) shared.snapshot = undefined;
        if (error instanceof StaleSnapshot && attempt < 10) continue;
        if (error instanceof StaleSnapshot)
          throw new BackendError(operation, 'the state kept changing under the read', { transient: true });
        throw this.#c.io.error(error, operation);
      }
    }
  }

  async loadEvents(aggregateId: string, shared?: SharedSnapshot): Promise<Event[]> {
    return this.#read(
      `load events of ${JSON.stringify(aggregateId)}`,
      async (s) => {
        const head = (await s.read<AggregateHead>(s.layout.aggregate(aggregateId))).value;
        const events: Event[] = [];
        for (let from = 1; from <= (head?.seq ?? 0); from += 256) {
          const to = Math.min(head?.seq ?? 0, from + 255);
          const batch = await Promise.all(
            Array.from({ length: to - from + 1 }, (_, i) =>
              s.read<Event>(s.layout.event(aggregateId, from + i)),
            ),
          );
          for (const e of batch) {
            if (!e.value) throw new StaleSnapshot(`events of ${aggregateId}`);
            events.push(e.value);
          }
        }
        return events;
      },
      shared,
    );
  }

  async loadSchedule(key: string, shared?: SharedSnapshot): Promise<Schedule | undefined> {
    return this.#read(
      `load schedule ${JSON.stringify(key)}`,
      async (s) => {
        const record = await s.record(key);
        return record ? toSchedule(record) : undefined;
      },
      shared,
    );
  }

  async listSchedules(query: DriverScheduleQuery, shared?: SharedSnapshot): Promise<Schedule[]> {
    return this.#read(
      'list schedules',
      async (s) =>
        (
          await listSchedules(s, {
            limit: query.limit,
            ...(query.through ? { through: query.through.getTime() } : {}),
            ...(query.prefix !== undefined ? { prefix: query.prefix } : {}),
            ...(query.after ? { after: query.after } : {}),
          })
        ).map(toSchedule),
      shared,
    );
  }

  async dueSchedules(now: Date, limit: number): Promise<Schedule[]> {
    return this.#read('read due schedules', async (s) =>
      (await dueSchedules(s, now.getTime(), limit)).map(toSchedule),
    );
  }

  async nextDueAt(): Promise<Date | undefined> {
    return this.#read('read the next due time', async (s) => {
      const next = await nextDueAt(s);
      return next === undefined ? undefined : new Date(next);
    });
  }

  async recordFailure(
    key: string,
    version: number,
    failure: { attempts: number; dueAt: Date; error: string },
  ): Promise<boolean> {
    try {
      await this.#commit({
        v: 1,
        tx: this.#c.log.newId(),
        exp: await this.#deadline(),
        ops: [{ op: 'fail', key, version, attempts: failure.attempts, dueAt: failure.dueAt.getTime() }],
      });
      return true;
    } catch (error) {
      if (error instanceof ConflictError) return false;
      throw error;
    }
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    const sub = this.#c.io.nc.subscribe(this.#c.layout.wake, {
      callback: (_error, msg) => {
        try {
          const note = msg.json<{ origin?: string; earliest?: number }>();
          if (note.origin === this.#c.origin) return;
          onChange(typeof note.earliest === 'number' ? { earliest: new Date(note.earliest) } : {});
        } catch {
          onChange({});
        }
      },
    });
    this.#subscriptions.add(sub);
    return () => {
      sub.unsubscribe();
      this.#subscriptions.delete(sub);
    };
  }

  async close(): Promise<void> {
    for (const sub of this.#subscriptions) sub.unsubscribe();
    this.#subscriptions.clear();
    await this.#c.materialiser.close();
  }

  /** The time after which a commit message stored by the server is void, in server time. */
  async #deadline(): Promise<number> {
    try {
      return (await this.#c.serverClock.now()) + COMMIT_VOID_AFTER_MS;
    } catch (error) {
      throw this.#c.io.error(error, 'read the server time for a commit');
    }
  }

  /** Logs `entry`, waits until it is applied, and throws a ConflictError when it did not commit. */
  async #commit(entry: Entry): Promise<void> {
    const c = this.#c;
    const seen = c.materialiser.highestApplied;
    const seq = await c.log.append(entry).catch((error: unknown) => {
      throw c.io.error(error, 'append to the commit log');
    });
    if (seq <= seen)
      throw new CorruptDataError(
        `stream ${c.layout.logStream} gave this commit sequence ${seq}, but sequences up to ${seen} were already applied: the stream's sequence went back (a NATS 2.9 server restart after its last message was purged); the commit will not take effect`,
      );
    await c.hooks?.afterAppend?.(seq);
    const state = await this.#applied(seq);
    const abort = await c.materialiser.outcome(seq, state);
    if (abort) {
      const kind = abort.kind === 'stale' ? 'schedule' : abort.kind;
      throw new ConflictError(
        kind,
        abort.subject,
        abort.message ? `${abort.subject}: ${abort.message}` : undefined,
      );
    }
    const puts = entry.ops.filter((o) => o.op === 'put');
    if (puts.length > 0) {
      const earliest = Math.min(...puts.map((o) => (o.op === 'put' ? o.at : Number.POSITIVE_INFINITY)));
      try {
        c.io.nc.publish(c.layout.wake, JSON.stringify({ origin: c.origin, earliest }));
      } catch (error) {
        c.logger.debug('could not announce a commit; other processes find it by rescanning', { error });
      }
    }
  }

  /** Waits until log entry `seq` is applied, retrying transient failures for the commit timeout. */
  async #applied(seq: number): Promise<AppliedState> {
    const deadline = performance.now() + this.#c.commitTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#c.materialiser.through(seq);
      } catch (error) {
        if (!isTransient(error) || performance.now() >= deadline)
          throw new BackendError(
            'apply a commit',
            `log entry ${seq} is logged but could not be applied yet (${error instanceof Error ? error.message : String(error)}); it takes effect when any process applies the log, unless it conflicts`,
            { cause: error, transient: isTransient(error) },
          );
        await new Promise((resolve) => setTimeout(resolve, Math.min(1000, 50 * 2 ** Math.min(attempt, 5))));
      }
    }
  }
}
