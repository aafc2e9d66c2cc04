import {
  ConflictError,
  createBufferedDelivery,
  createBufferedTransaction,
  type DeadLetterRecord,
  type DeliveryTransaction,
  type DriverDeadLetterQuery,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  type Logger,
  type Schedule,
  type StoreDriver,
  type StoreOp,
} from '@duetime/core';
import type { Subscription } from '@nats-io/transport-node';
import type { NatsIo } from '../io.js';
import type { Layout } from '../layout.js';
import { Claimer, type ClaimSettings } from './claims.js';
import { type Claim, type CommitOutcome, Committer } from './commit.js';
import { DueIndex, type Found } from './due.js';
import { toDeadLetter, toEvent, toSchedule } from './records.js';

export interface NatsStoreContext {
  claims: ClaimSettings;
  io: NatsIo;
  layout: Layout;
  /** Added to record sequences to make versions (see `MetaValue`). */
  versionBase: number;
  logger: Logger;
  /** Identifies this backend instance in wake-up messages (its own are ignored). */
  origin: string;
}

const NO_CLAIMS: ReadonlyMap<string, Claim> = new Map();

/**
 * The store driver on JetStream: every read is a direct get (one subject, a batch of subjects, or a
 * range in stream order), every commit one atomic batch publish whose preconditions are JetStream's
 * compare-and-set on subject sequences. See docs/design.md.
 *
 * Open deliveries of one driver never hand out one schedule twice. Across processes, deliveries claim
 * what they run with claim markers (see claims.ts) when other processes deliver from the same store; a
 * claim only saves duplicate work: every consumption is a compare-and-set at commit either way.
 */
export class NatsStoreDriver implements StoreDriver<undefined> {
  readonly #c: NatsStoreContext;
  readonly #index: DueIndex;
  /** Claims of this process's open deliveries, by key. */
  readonly #held = new Map<string, Found>();
  /** Schedules another process claimed, skipped until their marker expires (or they are seen stale). */
  readonly #theirs = new Map<string, { found: Found; until: number }>();
  readonly #claimer: Claimer;
  readonly #subscriptions = new Set<Subscription>();
  readonly #purges = new Set<Promise<void>>();
  readonly #committer: Committer;

  constructor(context: NatsStoreContext) {
    this.#c = context;
    this.#index = new DueIndex(context.io, context.layout, context.versionBase, context.logger);
    this.#claimer = new Claimer(context.io, context.layout, context.origin, context.claims, context.logger);
    this.#committer = new Committer({
      io: context.io,
      layout: context.layout,
      versionBase: context.versionBase,
    });
  }

  /** Commits one group (a transaction, or a delivery without batch commits); throws why it did not apply. */
  async #commitOne(ops: StoreOp[], claims: ReadonlyMap<string, Claim>): Promise<void> {
    const outcome = await this.#committer.commit([{ ops, claims }]);
    const refused = outcome.results[0];
    if (refused) throw refused;
    this.#announce(outcome);
  }

  async begin(): Promise<DriverTransaction<undefined>> {
    return createBufferedTransaction({
      reads: this,
      commit: (ops) => this.#commitOne(ops, NO_CLAIMS),
    });
  }

  async deliver(now: Date, limit: number): Promise<DeliveryTransaction<undefined>> {
    this.#forgetTheirs();
    // The scan registers each schedule it takes in #held at once, before it reads on: a delivery that
    // ends meanwhile then never purges an entry this one still holds.
    const taken: Found[] = [];
    const registry = {
      has: (key: string) => this.#held.has(key) || this.#theirs.has(key),
      set: (key: string, f: Found) => {
        this.#held.set(key, f);
        taken.push(f);
      },
    };
    let mine: Found[];
    try {
      mine = await this.#index.due(now.getTime(), limit, registry, {
        claim: true,
        spread: this.#claimer.active,
      });
      if (mine.length > 0 && this.#claimer.active) {
        const { mine: got, theirs } = await this.#claimer.claim(mine);
        const until = performance.now() + this.#claimer.ttlMs;
        for (const f of theirs) {
          if (this.#held.get(f.schedule.key) === f) this.#held.delete(f.schedule.key);
          this.#theirs.set(f.schedule.key, { found: f, until });
        }
        mine = got;
      }
    } catch (error) {
      this.#release(taken, new Set());
      throw error;
    }
    const claims = new Map<string, Claim>(mine.map((f) => [f.schedule.key, f]));
    const claimed = mine.map((f) => f.schedule).sort(compareDue);
    const stopRenewing = this.#claimer.renew(mine);
    let ended = false;
    const end = (consumed: ReadonlySet<string>) => {
      if (ended) return;
      ended = true;
      stopRenewing();
      this.#release(mine, consumed);
      const givenBack = mine.filter((f) => !consumed.has(f.schedule.key));
      if (givenBack.length > 0) void this.#claimer.release(givenBack);
    };
    return createBufferedDelivery({
      claimed,
      reads: this,
      commit: (ops) => this.#commitOne(ops, claims),
      commitGroups: async (groups) => {
        try {
          const outcome = await this.#committer.commit(groups.map((ops) => ({ ops, claims })));
          const consumed = new Set<string>();
          groups.forEach((ops, i) => {
            const refused = outcome.results[i];
            // Another process consumed or replaced it first: other dispatchers work on this store.
            if (refused instanceof ConflictError && refused.kind === 'schedule')
              this.#claimer.noteContention();
            if (refused) return;
            for (const op of ops) if (op.op === 'consume') consumed.add(op.key);
          });
          end(consumed);
          this.#announce(outcome);
          return outcome.results;
        } catch (error) {
          end(new Set());
          throw error;
        }
      },
      rollback: async () => end(new Set()),
    });
  }

  /** Forgets claims of other processes whose markers have expired: their entries are read again. */
  #forgetTheirs(): void {
    const now = performance.now();
    for (const [key, t] of this.#theirs) {
      if (t.until > now) continue;
      this.#theirs.delete(key);
      this.#index.released(t.found);
    }
  }

  /**
   * Ends a delivery's claims: the consumed ones' entries are stale now, the others must be read again.
   * Then purges the stale heads of the seconds the delivery read from.
   */
  #release(claims: readonly Found[], consumed: ReadonlySet<string>): void {
    const buckets = new Map<string, number>();
    for (const f of claims) {
      if (this.#held.get(f.schedule.key) === f) this.#held.delete(f.schedule.key);
      if (consumed.has(f.schedule.key)) this.#index.consumed(f);
      if (!consumed.has(f.schedule.key)) {
        this.#index.released(f);
        buckets.set(f.bucket, Math.min(buckets.get(f.bucket) ?? Number.POSITIVE_INFINITY, f.entrySeq));
      } else if (!buckets.has(f.bucket)) buckets.set(f.bucket, Number.POSITIVE_INFINITY);
    }
    // Entries of open deliveries, here or (claimed) in other processes, are not stale: they stay.
    for (const f of [...this.#held.values(), ...[...this.#theirs.values()].map((t) => t.found)])
      if (buckets.has(f.bucket)) buckets.set(f.bucket, Math.min(buckets.get(f.bucket)!, f.entrySeq));
    for (const [bucket, bound] of buckets) {
      const position = this.#index.scanPosition(bucket);
      if (position === undefined) continue;
      const before = Math.min(position, bound);
      const purge = this.#index.purge(bucket, before).finally(() => this.#purges.delete(purge));
      this.#purges.add(purge);
    }
  }

  /** Tells other processes that schedules changed (core tells this process's dispatchers). */
  #announce(outcome: CommitOutcome): void {
    for (const dues of outcome.dues) this.#index.noteDue(dues);
    const earliestOfGroups = outcome.earliest;
    let earliest: number | undefined;
    for (const e of earliestOfGroups)
      if (e !== undefined && (earliest === undefined || e < earliest)) earliest = e;
    if (earliest === undefined || this.#c.io.closed) return;
    try {
      this.#c.io.nc.publish(this.#c.layout.wake, JSON.stringify({ o: this.#c.origin, e: earliest }));
    } catch (error) {
      this.#c.logger.warn('nats store: announcing a commit failed; other processes rescan', { error });
    }
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const events: Event[] = [];
    for await (const m of this.#c.io.scan(this.#c.layout.storeStream, this.#c.layout.events(aggregateId))) {
      const sequence = Number(m.subject.slice(m.subject.lastIndexOf('.') + 1));
      events.push(toEvent(aggregateId, sequence, m));
    }
    return events.sort((a, b) => a.sequence - b.sequence);
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const m = await this.#c.io.last(this.#c.layout.storeStream, this.#c.layout.record(key));
    return m ? toSchedule(key, m, this.#c.versionBase) : undefined;
  }

  /**
   * Reads every record under the prefix (in stream order) and keeps the first `limit` by (`at`, `key`):
   * a scan, as there is no index by deadline. Tools list; deliveries use the due index.
   */
  async listSchedules(query: DriverScheduleQuery): Promise<Schedule[]> {
    const { layout, io } = this.#c;
    const prefix = query.prefix ?? '';
    const page = new SortedPage<Schedule>(query.limit, compareAt);
    for await (const m of io.scan(layout.storeStream, layout.recordFilter(prefix))) {
      const key = layout.keyOfRecord(m.subject);
      if (!key.startsWith(prefix)) continue;
      const s = toSchedule(key, m, this.#c.versionBase);
      if (!s) continue;
      if (query.through && s.at.getTime() > query.through.getTime()) continue;
      if (query.after && compareAt(s, { at: new Date(query.after.at), key: query.after.key }) <= 0) continue;
      page.add(s);
    }
    return page.items();
  }

  async dueSchedules(now: Date, limit: number): Promise<Schedule[]> {
    const found = await this.#index.due(now.getTime(), limit, new Set<string>(), { claim: false });
    return found.map((f) => f.schedule).sort(compareDue);
  }

  async nextDueAt(): Promise<Date | undefined> {
    this.#forgetTheirs();
    const held = { has: (key: string) => this.#held.has(key) || this.#theirs.has(key) };
    let min = await this.#index.next(held);
    for (const f of [...this.#held.values(), ...[...this.#theirs.values()].map((t) => t.found)]) {
      const due = f.schedule.dueAt.getTime();
      if (min === undefined || due < min) min = due;
    }
    return min === undefined ? undefined : new Date(min);
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    const m = await this.#c.io.last(this.#c.layout.storeStream, this.#c.layout.deadLetter(key));
    return m ? toDeadLetter(key, m) : undefined;
  }

  async listDeadLetters(query: DriverDeadLetterQuery): Promise<DeadLetterRecord[]> {
    const { layout, io } = this.#c;
    const prefix = query.prefix ?? '';
    const page = new SortedPage<DeadLetterRecord>(query.limit, (a, b) => compareKeys(a.key, b.key));
    for await (const m of io.scan(layout.storeStream, layout.deadLetterFilter(prefix))) {
      const key = layout.keyOfDeadLetter(m.subject);
      if (!key.startsWith(prefix) || (query.after !== undefined && key <= query.after)) continue;
      const d = toDeadLetter(key, m);
      if (d) page.add(d);
    }
    return page.items();
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    const { io, layout, origin, logger } = this.#c;
    const sub = io.nc.subscribe(layout.wake, {
      callback: (error, msg) => {
        if (error) return;
        try {
          const wake = msg.json<{ o?: string; e?: number }>();
          if (wake.o === origin) return;
          if (typeof wake.e === 'number') this.#index.noteDue([wake.e]);
          onChange(typeof wake.e === 'number' ? { earliest: new Date(wake.e) } : {});
        } catch (err) {
          logger.warn('nats store: ignoring an unreadable wake-up message', { error: err });
        }
      },
    });
    this.#subscriptions.add(sub);
    return () => {
      this.#subscriptions.delete(sub);
      sub.unsubscribe();
    };
  }

  async close(): Promise<void> {
    for (const sub of this.#subscriptions) sub.unsubscribe();
    this.#subscriptions.clear();
    await Promise.allSettled([...this.#purges]);
  }
}

function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function compareDue(a: Schedule, b: Schedule): number {
  return a.dueAt.getTime() - b.dueAt.getTime() || compareKeys(a.key, b.key);
}

function compareAt(a: Pick<Schedule, 'at' | 'key'>, b: Pick<Schedule, 'at' | 'key'>): number {
  return a.at.getTime() - b.at.getTime() || compareKeys(a.key, b.key);
}

/** The first `limit` items by `compare` of what is added, in order. */
class SortedPage<T> {
  readonly #items: T[] = [];
  readonly #limit: number;
  readonly #compare: (a: T, b: T) => number;

  constructor(limit: number, compare: (a: T, b: T) => number) {
    this.#limit = limit;
    this.#compare = compare;
  }

  add(item: T): void {
    const items = this.#items;
    if (items.length >= this.#limit && this.#compare(item, items[items.length - 1] as T) >= 0) return;
    let lo = 0;
    let hi = items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#compare(items[mid] as T, item) <= 0) lo = mid + 1;
      else hi = mid;
    }
    items.splice(lo, 0, item);
    if (items.length > this.#limit) items.pop();
  }

  items(): T[] {
    return this.#items;
  }
}

export type { StoreOp };
