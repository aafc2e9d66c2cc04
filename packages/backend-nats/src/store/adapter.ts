import {
  type Changes,
  type Claimed,
  type ClaimRequest,
  ConflictError,
  type DeadLetterListQuery,
  type DeadLetterRecord,
  type Event,
  type ListQuery,
  type Logger,
  type Schedule,
  type ScheduleHead,
  type Settlement,
  type StoreAdapter,
  type Unit,
  type WatchEvent,
  type Write,
} from '@duetime/core';
import type { Subscription } from '@nats-io/transport-node';
import { MAX_ATOMIC_BATCH, type NatsIo } from '../io.js';
import type { Layout } from '../layout.js';
import { Claimer, type ClaimSettings } from './claims.js';
import { type CommitOutcome, Committer } from './commit.js';
import { DueIndex, type Found, REPAIR_DEFAULTS, type RepairSettings } from './due.js';
import type { Claim, StoreOp } from './plan.js';
import { compareDue, listDeadLetters, listSchedules } from './reads.js';
import { toEvent, toSchedule } from './records.js';

export interface NatsStoreContext {
  claims: ClaimSettings;
  io: NatsIo;
  layout: Layout;
  /** Added to record sequences to make versions (see `MetaValue`). */
  versionBase: number;
  /** The most messages one atomic batch holds (the backend's `atomicBatchLimit`; default 1,000). */
  atomicBatchLimit?: number;
  logger: Logger;
  /** Identifies this backend instance in wake-up messages (its own are ignored). */
  origin: string;
  /** The server's time (a lower bound), in ms since the epoch: judges claim markers. */
  serverNow: () => Promise<number>;
  /** The reconciliation sweep of the due index (see {@link DueIndex.repair}); defaults otherwise. */
  repairEveryMs?: number;
  repairGraceMs?: number;
}

/** A unit of work: nothing lasting, or a delivery's claims. */
export interface NatsUnit extends Unit<undefined> {
  readonly claimed?: readonly Claimed[];
  /** The entries this unit claimed (with their markers). */
  readonly mine: readonly Found[];
  readonly claims: ReadonlyMap<string, Claim>;
  ended: boolean;
}

/**
 * Messages a settlement may write (tombstone, record, dead letter, due-index entries): the most schedules
 * one delivery claims, so that its settlements usually fit one atomic batch (1,000 messages).
 */
const CLAIM_LIMIT = 250;

/**
 * The store on JetStream, a buffered adapter: every read is a direct get (one subject, a batch of subjects,
 * or a range in stream order), every commit one atomic batch publish whose preconditions are JetStream's
 * compare-and-set on subject sequences. See docs/design.md.
 *
 * Open units of one adapter never claim one schedule twice. Across processes, units claim what they run
 * with claim markers (see claims.ts) when other processes deliver from the same store; a claim only saves
 * duplicate work: every consumption is a compare-and-set at commit either way.
 */
export class NatsStoreAdapter implements StoreAdapter<undefined, NatsUnit> {
  readonly #c: NatsStoreContext;
  readonly #index: DueIndex;
  /** Claims of this process's open units, by key. */
  readonly #held = new Map<string, Found>();
  /** Schedules another process claimed, skipped until their marker lapses. */
  readonly #theirs = new Map<string, { found: Found; until: number }>();
  readonly #claimer: Claimer;
  readonly #subscriptions = new Set<Subscription>();
  readonly #purges = new Set<Promise<void>>();
  readonly #committer: Committer;
  readonly #repair: RepairSettings;
  /** When the next pass of the reconciliation sweep is due (performance.now()), and the pass running. */
  #nextRepair: number;
  #repairing: Promise<void> | undefined;
  readonly #stopStatus: () => void;
  readonly renewEveryMs: number;
  readonly limits = { claim: CLAIM_LIMIT };

  constructor(context: NatsStoreContext) {
    this.#c = context;
    this.#index = new DueIndex(context.io, context.layout, context.versionBase, context.logger);
    this.#claimer = new Claimer(
      context.io,
      context.layout,
      context.origin,
      context.claims,
      context.logger,
      context.serverNow,
    );
    this.#committer = new Committer({
      io: context.io,
      layout: context.layout,
      versionBase: context.versionBase,
      maxBatch: context.atomicBatchLimit ?? MAX_ATOMIC_BATCH,
    });
    this.renewEveryMs = Math.max(250, Math.floor(context.claims.ttlMs / 3));
    this.#repair = {
      everyMs: context.repairEveryMs ?? REPAIR_DEFAULTS.everyMs,
      graceMs: context.repairGraceMs ?? REPAIR_DEFAULTS.graceMs,
    };
    this.#nextRepair = performance.now() + this.#repair.everyMs;
    // What this process learnt of the index may predate an outage: read it afresh after a reconnection.
    this.#stopStatus = onReconnect(context.io, () => this.#index.reset());
  }

  /**
   * Starts a pass of the due index's reconciliation sweep when one is due (in the background: deliveries
   * do not wait for it). Any pending schedule whose due time has passed is so found again, whatever made
   * the index miss it; a pass that fails (an outage) is logged, and the next one reads on.
   */
  #maybeRepair(now: number): void {
    if (this.#repairing || performance.now() < this.#nextRepair || this.#c.io.closed) return;
    this.#nextRepair = performance.now() + this.#repair.everyMs;
    const held = { has: (key: string) => this.#held.has(key) || this.#theirs.has(key) };
    this.#repairing = this.#index
      .repair(now, this.#repair.graceMs, held)
      .then(
        (dues) => {
          // Found some: the wake-up tells other processes to look again (this one's next scan finds them).
          if (dues.length > 0)
            this.#announce({ results: [undefined], earliest: [Math.min(...dues)], dues: [dues] });
        },
        (error: unknown) =>
          this.#c.logger.warn('nats store: a pass of the due-index sweep failed; the next one reads on', {
            error,
          }),
      )
      .finally(() => {
        this.#repairing = undefined;
      });
  }

  async begin(claim?: ClaimRequest): Promise<NatsUnit> {
    if (!claim) return { mine: [], claims: new Map(), ended: false };
    this.#forgetTheirs();
    this.#maybeRepair(claim.now.getTime());
    // The scan registers each schedule it takes in #held at once, before it reads on: a unit that ends
    // meanwhile then never purges an entry this one still holds.
    const taken: Found[] = [];
    const registry = {
      has: (key: string) => this.#held.has(key) || this.#theirs.has(key),
      entry: (key: string) => this.#held.get(key) ?? this.#theirs.get(key)?.found,
      set: (key: string, f: Found) => {
        this.#held.set(key, f);
        taken.push(f);
      },
    };
    let mine: Found[];
    try {
      mine = await this.#index.due(claim.now.getTime(), claim.limit, registry, {
        claim: true,
        spread: this.#claimer.contended,
      });
      if (mine.length > 0 && this.#claimer.active) {
        const { mine: got, theirs } = await this.#claimer.claim(mine);
        const until = performance.now() + this.#claimer.ttlMs;
        this.#index.met(theirs.map((f) => f.bucket));
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
    const claimed: Claimed[] = mine
      .map((f) => (f.interrupted ? { ...f.schedule, interrupted: true } : { ...f.schedule }))
      .sort(compareDue);
    return {
      claimed,
      mine,
      claims: new Map<string, Claim>(mine.map((f) => [f.schedule.key, f])),
      ended: false,
    };
  }

  async commit(unit: NatsUnit, changes: Changes): Promise<ReadonlyMap<string, Error>> {
    const rejected = new Map<string, Error>();
    const consumed = new Set<string>();
    try {
      if (changes.writes.length > 0) {
        const outcome = await this.#committer.commit([
          { ops: changes.writes.map(opOf), claims: unit.claims },
        ]);
        const refused = outcome.results[0];
        if (refused) throw refused;
        this.#announce(outcome);
      }
      const marked = new Map(
        unit.mine.filter((f) => f.claimSeq !== undefined).map((f) => [f.schedule.key, f.seq]),
      );
      const settling = changes.settlements
        .map((s) => ({ s, ops: settlementOps(s, marked.get(s.schedule.key)) }))
        .filter(({ ops }) => ops.length > 0);
      if (settling.length > 0) {
        const outcome = await this.#committer.commit(
          settling.map(({ ops }) => ({ ops, claims: unit.claims })),
        );
        settling.forEach(({ s }, i) => {
          const refused = outcome.results[i];
          if (refused) {
            // Another process consumed or replaced it first: other dispatchers work on this store.
            if (refused instanceof ConflictError && refused.kind === 'schedule')
              this.#claimer.noteContention();
            rejected.set(s.schedule.key, refused);
          } else if (s.outcome === 'consume') consumed.add(s.schedule.key);
          // The batch marked the claim of a settled schedule settled: nothing to give back.
          if (!refused && settling[i]!.ops.some((op) => op.op === 'unclaim'))
            for (const f of unit.mine) if (f.schedule.key === s.schedule.key) f.claimSeq = undefined;
        });
        this.#announce(outcome);
      }
    } finally {
      this.#end(unit, consumed);
    }
    return rejected;
  }

  async rollback(unit: NatsUnit): Promise<void> {
    this.#end(unit, new Set());
  }

  async renew(unit: NatsUnit): Promise<void> {
    if (!unit.ended) await this.#claimer.renew(unit.mine);
  }

  /** Ends a unit's claims: markers still held are given back, so others may take them at once. */
  #end(unit: NatsUnit, consumed: ReadonlySet<string>): void {
    if (unit.ended) return;
    unit.ended = true;
    if (unit.mine.length === 0) return;
    this.#release(unit.mine, consumed);
    const givenBack = unit.mine.filter((f) => !consumed.has(f.schedule.key));
    if (givenBack.length > 0) void this.#claimer.release(givenBack);
  }

  /** Forgets claims of other processes whose markers have lapsed: their entries are read again. */
  #forgetTheirs(): void {
    const now = performance.now();
    for (const [key, t] of this.#theirs) {
      if (t.until > now) continue;
      this.#theirs.delete(key);
      this.#index.released(t.found);
    }
  }

  /**
   * Ends claims: the consumed ones' entries are stale now, the others must be read again. Then purges the
   * stale heads of the seconds the unit read from.
   */
  #release(claims: readonly Found[], consumed: ReadonlySet<string>): void {
    const buckets = new Map<string, number>();
    for (const f of claims) {
      if (this.#held.get(f.schedule.key) === f) this.#held.delete(f.schedule.key);
      if (consumed.has(f.schedule.key)) {
        this.#index.consumed(f);
        if (!buckets.has(f.bucket)) buckets.set(f.bucket, Number.POSITIVE_INFINITY);
      } else {
        this.#index.released(f);
        buckets.set(f.bucket, Math.min(buckets.get(f.bucket) ?? Number.POSITIVE_INFINITY, f.entrySeq));
      }
    }
    // Entries of open units, here or (claimed) in other processes, are not stale: they stay.
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
    let earliest: number | undefined;
    for (const e of outcome.earliest)
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

  async listSchedules(query: ListQuery): Promise<ScheduleHead[]> {
    const { order, prefix, after, recurring, through, limit } = query;
    // The next deadline (what an idle dispatcher asks): the due index answers it without reading every
    // record; other queries scan.
    if (
      order === 'due' &&
      limit === 1 &&
      through === undefined &&
      prefix === undefined &&
      after === undefined &&
      recurring === undefined
    ) {
      const next = await this.#next();
      if (next !== 'unknown') return next ? [next] : [];
    }
    return listSchedules(this.#c, query);
  }

  /** The schedule due first, from the due index; `unknown` when the index cannot tell which it is. */
  async #next(): Promise<Schedule | undefined | 'unknown'> {
    this.#forgetTheirs();
    const open = [...this.#held.values(), ...[...this.#theirs.values()].map((t) => t.found)];
    const held = new Set(open.map((f) => f.schedule.key));
    const due = await this.#index.next(held);
    const candidates = open.map((f) => f.schedule);
    if (due !== undefined) {
      const found = await this.#index.due(due, 1, held, { claim: false });
      if (found.length === 0) return 'unknown';
      candidates.push(...found.map((f) => f.schedule));
    }
    const first = candidates.sort(compareDue)[0];
    return first ? { ...first } : undefined;
  }

  async listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]> {
    return listDeadLetters(this.#c, query);
  }

  watch(listener: (event: WatchEvent) => void): () => void {
    const { io, layout, origin, logger } = this.#c;
    const sub = io.nc.subscribe(layout.wake, {
      callback: (error, msg) => {
        if (error) return;
        try {
          const wake = msg.json<{ o?: string; e?: number }>();
          if (wake.o === origin) return;
          if (typeof wake.e === 'number') this.#index.noteDue([wake.e]);
          listener(
            typeof wake.e === 'number' ? { type: 'change', earliest: new Date(wake.e) } : { type: 'change' },
          );
        } catch (err) {
          logger.warn('nats store: ignoring an unreadable wake-up message', { error: err });
        }
      },
    });
    this.#subscriptions.add(sub);
    const stopStatus = watchStatus(io, listener);
    // The subscription is registered with the server once the connection flushes: live from then on.
    void io.nc.flush().then(
      () => {
        if (this.#subscriptions.has(sub)) listener({ type: 'live' });
      },
      () => {},
    );
    return () => {
      stopStatus();
      this.#subscriptions.delete(sub);
      sub.unsubscribe();
    };
  }

  async close(): Promise<void> {
    this.#stopStatus();
    for (const sub of this.#subscriptions) sub.unsubscribe();
    this.#subscriptions.clear();
    await Promise.allSettled([...this.#purges, this.#repairing]);
  }
}

/** Calls `handle` with the type of every status change of the connection of `io`; returns how to stop. */
function onStatus(io: NatsIo, handle: (type: string) => void): () => void {
  const statuses = io.nc.status() as AsyncIterable<{ type: string }> & { stop?: () => void };
  let stopped = false;
  void (async () => {
    try {
      for await (const status of statuses) {
        if (stopped) break;
        handle(status.type);
      }
    } catch {
      // The iterator ends with the connection.
    }
  })();
  return () => {
    stopped = true;
    statuses.stop?.();
  };
}

/** Calls `then` after every reconnection of the connection of `io`; returns how to stop. */
function onReconnect(io: NatsIo, then: () => void): () => void {
  return onStatus(io, (type) => {
    if (type === 'reconnect') then();
  });
}

/** Reports `lost` on a disconnection and `live` once reconnected (the subscription is resent then). */
function watchStatus(io: NatsIo, listener: (event: WatchEvent) => void): () => void {
  return onStatus(io, (type) => {
    if (type === 'disconnect') listener({ type: 'lost' });
    else if (type === 'reconnect') listener({ type: 'live' });
  });
}

/** A write as a store operation. */
function opOf(w: Write): StoreOp {
  return w;
}

/**
 * The operations of one settlement, applied as one group (all or nothing); a consumed or retried
 * schedule's claim marker (on the record sequence `marked`) is marked settled with them.
 */
function settlementOps(s: Settlement, marked: number | undefined): StoreOp[] {
  const { key, version } = s.schedule;
  const writes = s.writes.map(opOf);
  if (s.outcome === 'release') return writes;
  const unclaim: StoreOp[] = marked !== undefined ? [{ op: 'unclaim', key, seq: marked }] : [];
  if (s.outcome === 'retry')
    return s.failure ? [{ op: 'fail', key, version, ...s.failure }, ...writes, ...unclaim] : writes;
  const ops: StoreOp[] = [{ op: 'consume', key, version }, ...unclaim];
  if (s.dead)
    ops.push({
      op: 'dead',
      record: { key, version, at: s.schedule.at, message: s.schedule.message, ...s.dead },
    });
  ops.push(...writes);
  if (s.next)
    ops.push({
      op: 'rearm',
      key,
      at: s.next.at,
      message: s.schedule.message,
      ...(s.next.dueAt ? { dueAt: s.next.dueAt } : {}),
      ...(s.next.recurrence !== undefined ? { recurrence: s.next.recurrence } : {}),
    });
  return ops;
}
