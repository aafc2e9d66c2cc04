import { setTimeout as sleep } from 'node:timers/promises';
import type {
  Changes,
  Claimed,
  ClaimRequest,
  DeadLetterListQuery,
  DeadLetterRecord,
  DueBacklog,
  Event,
  ListQuery,
  Logger,
  Schedule,
  ScheduleHead,
  Settlement,
  StoreAdapter,
  Unit,
  WatchEvent,
} from '@duetime/core';
import { MAX_ATOMIC_BATCH, type NatsIo, onStatus, type PulledMessage, type StoredMessage } from '../io.js';
import { H } from '../jetstream-scheduler/headers.js';
import type { Layout } from '../layout.js';
import { Committer } from './commit.js';
import { type Claim, type StoreOp, timerMessage } from './plan.js';
import {
  compareDue,
  countDeadLetters,
  countSchedules,
  dueBacklog,
  listDeadLetters,
  listSchedules,
} from './reads.js';
import { DELETED, isTombstone, timerIdOf, toEvent, toSchedule } from './records.js';

export interface NatsStoreContext {
  io: NatsIo;
  layout: Layout;
  /** Added to record sequences to make versions (see `MetaValue`). */
  versionBase: number;
  /** The most messages one atomic batch holds (the backend's `atomicBatchLimit`; default 1,000). */
  atomicBatchLimit?: number;
  /** The fires consumer's `ack_wait`: how long a claim lives unrenewed. */
  claimTtlMs: number;
  /** How long before its due time a schedule's timer fires (held by the claiming process until due). */
  fireAheadMs: number;
  /** How long after a stale fire its key's timer is looked at (tests; {@link TIMER_CHECK_DELAY_MS} unless given). */
  timerCheckDelayMs?: number;
  logger: Logger;
  /**
   * The server's time as an upper bound, in ms since the epoch: the clock the timers fire by. A delivery
   * whose `now` is later runs ahead of the server (see {@link NatsStoreAdapter.begin}).
   */
  serverLatest: () => Promise<number>;
}

/** A fire pulled from the fires consumer: its key, the timer it came from, and its due instant. */
interface Fire {
  key: string;
  /** The subject of its key's record. */
  record: string;
  id: string;
  due: number;
  /** Its latest delivery to this process (renewals and the acknowledgement go through it). */
  pulled: PulledMessage;
  /**
   * An earlier claim of it lapsed (its process died): delivered again (a delivery count above 1), or a
   * copy given back by a delivery that held it so and did not record the crash ({@link INTERRUPTED}).
   */
  interrupted: boolean;
}

/** Header of a fire given back after a crash was seen on it and not recorded yet. */
const INTERRUPTED = 'Duetime-Interrupted';

/** A unit of work: nothing lasting, or a delivery's claims (the fires it holds). */
export interface NatsUnit extends Unit<undefined> {
  readonly claimed?: readonly Claimed[];
  readonly fires: ReadonlyMap<string, Fire>;
  readonly claims: ReadonlyMap<string, Claim>;
  ended: boolean;
}

/**
 * Messages a settlement may write (tombstone, dead letter, next record and its timer): the most schedules
 * one delivery claims, so that its settlements usually fit one atomic batch (1,000 messages).
 */
const CLAIM_LIMIT = 250;

/** How often a process purges acknowledged fires (below the consumer's acknowledgement floor). */
const PURGE_EVERY_MS = 5_000;

/** How long one long poll of the fires consumer waits (see {@link NatsStoreAdapter.watch}). */
const LONG_POLL_MS = 10_000;
/** The most fires a process holds ahead of their due instants (see {@link NatsStoreAdapter.watch}). */
const EARLY_CAP = 1_000;
/** How often the watch looks whether the due fires it took were taken by a delivery. */
const HELD_LOOK_MS = 20;
/** How long past its due instant a held fire no delivery took is kept before it is given back. */
const HOLD_PAST_DUE_MS = 2_000;

/** How long after a stale fire its key's timer is looked at (see {@link NatsStoreAdapter.#checkTimer}). */
const TIMER_CHECK_DELAY_MS = 200;

/**
 * How far a delivery's `now` may run ahead of the server's clock before the delivery stops waiting for
 * timers and reads the records for what is due by it (see {@link NatsStoreAdapter.begin}).
 */
const AHEAD_OF_SERVER_MS = 2_000;

/**
 * The store on JetStream, a buffered adapter: every read is a direct get, every commit one atomic batch
 * publish whose preconditions are JetStream's compare-and-set on subject sequences. See docs/design.md.
 *
 * The server keeps the time: each record comes with its timer (`t.<key>`, a JetStream message schedule)
 * that fires into `f.<key>` at the record's due time (`fireAheadMs` before it). One durable pull consumer
 * reads the fires; a delivery's claim on a schedule is the pending acknowledgement of its fire, renewed
 * while its processor runs (`+WPI`), acknowledged once the delivery committed, given back by publishing
 * the fire again. A fire is a hint, the record the truth: a fire whose timer id is not the current
 * record's (replaced, retried, cancelled, consumed) is acknowledged and dropped. A fire delivered again
 * after its claim lapsed (the process holding it died) is claimed as `interrupted`.
 */
export class NatsStoreAdapter implements StoreAdapter<undefined, NatsUnit> {
  readonly #c: NatsStoreContext;
  readonly #committer: Committer;
  /** Keys claimed by this process's open units. */
  readonly #open = new Set<string>();
  /** Fires pulled before their due instant (or while their key was claimed here), held and renewed. */
  readonly #early = new Map<number, Fire>();
  /** Fires claimed by this process's open units, by stream sequence. */
  readonly #inHand = new Map<number, Fire>();
  /** Fires a `begin` is claiming (between taking them and reading their records), by stream sequence. */
  readonly #taking = new Map<number, Fire>();
  /** Long polls of the fires consumer waiting here: a fire the server fires goes to one of them. */
  #listening = 0;
  /** Whether the fires consumer held no undelivered fire at the last look (see {@link begin}). */
  #quiet = false;
  readonly #renewEarly: ReturnType<typeof setInterval>;
  readonly #listeners = new Set<(event: WatchEvent) => void>();
  #lastPurge = 0;
  #warnedAhead = false;
  #purging: Promise<void> | undefined;
  readonly #closing: (() => Promise<void>)[] = [];
  readonly renewEveryMs: number;
  readonly dueByWatch = true;
  readonly limits = { claim: CLAIM_LIMIT };

  constructor(context: NatsStoreContext) {
    this.#c = context;
    this.#committer = new Committer({
      io: context.io,
      layout: context.layout,
      versionBase: context.versionBase,
      maxBatch: context.atomicBatchLimit ?? MAX_ATOMIC_BATCH,
      fireAheadMs: context.fireAheadMs,
    });
    this.renewEveryMs = Math.max(250, Math.floor(context.claimTtlMs / 3));
    this.#renewEarly = setInterval(
      () => {
        const now = Date.now();
        for (const [seq, fire] of this.#early) {
          // Due a while ago and still not taken (its dispatcher stopped, is busy, or none runs here): given
          // back, so that another process may run it; renewing it forever would keep it from every other.
          if (now - fire.due > Math.min(HOLD_PAST_DUE_MS, context.claimTtlMs)) {
            this.#early.delete(seq);
            void this.#giveBack(fire);
          } else context.io.ack(fire.pulled, '+WPI');
        }
      },
      Math.min(this.renewEveryMs, 1000),
    );
    this.#renewEarly.unref?.();
  }

  async begin(claim?: ClaimRequest): Promise<NatsUnit> {
    if (!claim) return { fires: new Map(), claims: new Map(), ended: false };
    const now = claim.now.getTime();
    const candidates: Fire[] = [];
    // Fires held until their due instant come first, then what the consumer has now.
    for (const [seq, fire] of [...this.#early].sort((a, b) => a[1].due - b[1].due)) {
      if (candidates.length >= claim.limit) break;
      if (fire.due > now || this.#open.has(fire.key)) continue;
      this.#early.delete(seq);
      this.#taking.set(seq, fire);
      candidates.push(fire);
    }
    // The consumer is asked only when it may hold fires: while a watch's long poll waits and the last look
    // found nothing undelivered, a fire arriving goes to that poll and is held here (the due instant's
    // wake-up then finds it in hand, a round trip sooner).
    if (candidates.length < claim.limit && (this.#listening === 0 || !this.#quiet)) {
      let pulled: PulledMessage[];
      const asked = claim.limit - candidates.length;
      try {
        pulled = await this.#c.io.pullNow(this.#c.layout.storeStream, this.#c.layout.firesConsumer, asked);
      } catch (error) {
        this.#hold(candidates);
        throw error;
      }
      this.#quiet = pulled.length < asked || pulled[pulled.length - 1]?.pending === 0;
      for (const m of pulled) {
        const fire = this.#fireOf(m);
        if (!fire) continue;
        if (fire.due > now || this.#open.has(fire.key)) {
          // Early, or its key is claimed here already (the record was replaced while it runs): held.
          this.#early.set(m.seq, fire);
        } else {
          this.#taking.set(m.seq, fire);
          candidates.push(fire);
        }
      }
    }
    // The next fire held until its due instant: the dispatcher comes back for it then (and is told of
    // the one after when it does).
    let earliest: number | undefined;
    for (const fire of this.#early.values())
      if (fire.due > now && (earliest === undefined || fire.due < earliest)) earliest = fire.due;
    if (earliest !== undefined) this.#emit({ type: 'change', earliest: new Date(earliest) });
    const unit = await this.#claim(candidates);
    // From here on the unit holds claims: nothing may throw it away (its keys would stay claimed here and
    // its fires held, unrenewed and never given back). Reading for a clock ahead of the server's is an
    // extra: an outage skips it.
    const room = claim.limit - (unit.claimed?.length ?? 0);
    if (room > 0)
      try {
        if (now > (await this.#c.serverLatest()) + AHEAD_OF_SERVER_MS)
          await this.#claimByReading(unit, now, room);
      } catch (error) {
        this.#c.logger.debug('nats store: reading what is due by a clock ahead of the server failed', {
          error,
        });
      }
    return unit;
  }

  /**
   * The timers fire by the server's clock. A delivery whose `now` runs ahead of it (a clock set forward,
   * a test's manual clock) still gets what is due by its `now`: the records are read for it (every one:
   * slow on a large store, so a clock that runs ahead is logged once). Such a claim holds no fire: it is
   * exclusive within this process only; the consumption's compare-and-set keeps effects single.
   */
  async #claimByReading(unit: NatsUnit, now: number, room: number): Promise<void> {
    const { io, layout, versionBase, logger } = this.#c;
    if (!this.#warnedAhead) {
      this.#warnedAhead = true;
      logger.warn(
        'nats store: a delivery runs on a clock ahead of the NATS server; it reads every record for what is due by its clock',
      );
    }
    const found: Claim[] = [];
    for await (const m of io.scan(layout.storeStream, layout.recordFilter(''))) {
      if (isTombstone(m)) continue;
      const key = layout.keyOfRecord(m.subject);
      if (this.#open.has(key)) continue;
      const schedule = toSchedule(key, m, versionBase);
      if (schedule && schedule.dueAt.getTime() <= now) found.push({ schedule, seq: m.seq });
    }
    const claims = unit.claims as Map<string, Claim>;
    const claimed = unit.claimed as Claimed[];
    let taken = 0;
    for (const c of found.sort((a, b) => compareDue(a.schedule, b.schedule))) {
      if (taken >= room) break;
      // Claimed by another unit of this process while the records were read.
      if (this.#open.has(c.schedule.key)) continue;
      taken++;
      this.#open.add(c.schedule.key);
      claims.set(c.schedule.key, c);
      claimed.push({ ...c.schedule });
    }
    claimed.sort(compareDue);
  }

  /** A pulled message as a fire, or undefined (terminated) when it is none of the store's. */
  #fireOf(m: PulledMessage): Fire | undefined {
    // Delivered to this process again (its claim lapsed while renewals could not reach the server): the
    // same message, held already. Its latest delivery is the one to renew; acknowledging either would
    // end the claim.
    const held = this.#early.get(m.seq) ?? this.#inHand.get(m.seq) ?? this.#taking.get(m.seq);
    if (held) {
      held.pulled = m;
      return undefined;
    }
    const id = m.headers?.get(H.timer);
    const due = Number(m.headers?.get(H.due));
    if (!id || !Number.isFinite(due)) {
      this.#c.logger.warn('nats store: a message on a fire subject without a timer; dropped', {
        subject: m.subject,
        seq: m.seq,
      });
      this.#c.io.ack(m, '+TERM');
      return undefined;
    }
    const key = this.#c.layout.keyOfFire(m.subject);
    return {
      key,
      record: this.#c.layout.record(key),
      id,
      due,
      pulled: m,
      interrupted: m.deliveryCount > 1 || m.headers?.get(INTERRUPTED) === '1',
    };
  }

  /** Puts fires back among those held (a `begin` that failed before claiming them). */
  #hold(fires: readonly Fire[]): void {
    for (const fire of fires) {
      this.#taking.delete(fire.pulled.seq);
      this.#early.set(fire.pulled.seq, fire);
    }
  }

  /** Claims the fires whose timer is the current record's; the others are stale and acknowledged. */
  async #claim(candidates: Fire[]): Promise<NatsUnit> {
    const { io, layout, versionBase } = this.#c;
    const fires = new Map<string, Fire>();
    const claims = new Map<string, Claim>();
    const claimed: Claimed[] = [];
    if (candidates.length === 0) return { claimed, fires, claims, ended: false };
    let records: Map<string, StoredMessage>;
    try {
      records = await io.lastOf(layout.storeStream, [...new Set(candidates.map((f) => f.record))]);
    } catch (error) {
      this.#hold(candidates);
      throw error;
    }
    const isCurrent = (fire: Fire, m: StoredMessage | undefined): m is StoredMessage =>
      m !== undefined && !isTombstone(m) && timerIdOf(m) === fire.id;
    // A replica a little behind may answer a direct get: a fire is found stale only by the leader.
    const stale = candidates.filter((f) => !isCurrent(f, records.get(f.record)));
    if (stale.length > 0) {
      try {
        const again = await Promise.all(stale.map((f) => io.last(layout.storeStream, f.record, true)));
        stale.forEach((f, i) => {
          const m = again[i];
          if (m) records.set(f.record, m);
          else records.delete(f.record);
        });
      } catch (error) {
        this.#hold(candidates);
        throw error;
      }
    }
    for (const fire of candidates) {
      this.#taking.delete(fire.pulled.seq);
      const m = records.get(fire.record);
      const current = isCurrent(fire, m);
      if (current && this.#open.has(fire.key) && !fires.has(fire.key)) {
        // Another open unit of this process claimed the key meanwhile: held until it ends.
        this.#early.set(fire.pulled.seq, fire);
        continue;
      }
      if (!current || fires.has(fire.key)) {
        // Replaced, retried, cancelled or consumed since it fired (or a fire repeated by the server).
        this.#c.logger.debug('nats store: a stale fire dropped', {
          key: fire.key,
          timer: fire.id,
          fire: fire.pulled.seq,
          record: m ? { seq: m.seq, timer: isTombstone(m) ? 'deleted' : timerIdOf(m) } : 'none',
        });
        // A timer replaced just as it fired: the server may drop the new timer with the old one. The
        // fire is acknowledged once its key's timer was looked at: a process that dies first leaves it to
        // be delivered again, and looked at again, elsewhere.
        if (!current && m && !isTombstone(m)) this.#checkTimer(fire, m);
        else io.ack(fire.pulled, '+ACK');
        continue;
      }
      const schedule = toSchedule(fire.key, m, versionBase) as Schedule;
      fires.set(fire.key, fire);
      this.#inHand.set(fire.pulled.seq, fire);
      claims.set(fire.key, { schedule, seq: m.seq });
      this.#open.add(fire.key);
      claimed.push(fire.interrupted ? { ...schedule, interrupted: true } : { ...schedule });
    }
    claimed.sort(compareDue);
    return { claimed, fires, claims, ended: false };
  }

  /**
   * Sees that a live record's timer is still there after a stale fire of its key, then acknowledges the
   * fire: NATS 2.15 drops a message schedule replaced within milliseconds of the instant the replaced one
   * fires (the old one fires, the new one is gone; test/timer-replaced-as-it-fires.test.ts). A stale fire
   * is that race's trace, so its key is looked at (a moment later, once the server is done with the old
   * one): when the record is unchanged, its timer is not on `t.<key>` and no fire of it is on `f.<key>`,
   * the timer is written again (compare-and-set on `t.<key>`, so a newer timer always wins). At worst a
   * fire comes twice: the second is stale once the first was consumed. Until the look is done the stale
   * fire stays unacknowledged, so that a crash (or an outage) in between has the consumer deliver it
   * again, to a process that looks again, instead of leaving the schedule without a timer for good.
   */
  #checkTimer(fire: Fire, record: StoredMessage): void {
    const { io, layout, versionBase, fireAheadMs, logger, timerCheckDelayMs } = this.#c;
    const { key } = fire;
    const id = timerIdOf(record);
    void (async () => {
      await sleep(timerCheckDelayMs ?? TIMER_CHECK_DELAY_MS);
      if (io.closed) return;
      const subjects = [layout.record(key), layout.timer(key), layout.fire(key)];
      const [r, t, f] = await io
        .lastOf(layout.storeStream, subjects)
        .then((found) => subjects.map((s) => found.get(s)));
      const schedule = toSchedule(key, record, versionBase);
      const missing =
        r?.seq === record.seq &&
        !(t && t.header(DELETED) === undefined && t.header(H.timer) === id) &&
        f?.header(H.timer) !== id &&
        schedule !== undefined;
      if (missing) {
        const timer = timerMessage(layout, key, schedule.dueAt.getTime(), id, fireAheadMs);
        const written = await io.publish(timer.subject, timer.data, {
          headers: timer.headers,
          expectSubjectSeq: t?.seq ?? 0,
        });
        logger.warn(
          'nats store: a schedule lost its timer to a replaced one that fired; timer written again',
          {
            key,
            timer: id,
            written: written !== 'conflict',
          },
        );
      }
      io.ack(fire.pulled, '+ACK');
    })().catch((error: unknown) =>
      // Left unacknowledged: the consumer delivers the stale fire again after its `ack_wait`.
      logger.debug?.('nats store: checking a timer failed; the stale fire comes again', { key, error }),
    );
  }

  async commit(unit: NatsUnit, changes: Changes): Promise<ReadonlyMap<string, Error>> {
    const rejected = new Map<string, Error>();
    const settled = new Set<string>();
    try {
      if (changes.writes.length > 0) {
        const outcome = await this.#committer.commit([{ ops: changes.writes, claims: unit.claims }]);
        const refused = outcome.results[0];
        if (refused) throw refused;
      }
      const settling = changes.settlements.map((s) => ({ s, ops: settlementOps(s) }));
      const writing = settling.filter(({ ops }) => ops.length > 0);
      if (writing.length > 0) {
        const outcome = await this.#committer.commit(
          writing.map(({ ops }) => ({ ops, claims: unit.claims })),
        );
        writing.forEach(({ s }, i) => {
          const refused = outcome.results[i];
          if (refused) rejected.set(s.schedule.key, refused);
        });
      }
      // Consumed or retried: its fire is done (a retry's record came with a timer of its own).
      for (const { s } of settling)
        if ((s.outcome === 'consume' || s.failure) && !rejected.has(s.schedule.key))
          settled.add(s.schedule.key);
    } finally {
      await this.#end(unit, settled);
    }
    return rejected;
  }

  async rollback(unit: NatsUnit): Promise<void> {
    await this.#end(unit, new Set());
  }

  async renew(unit: NatsUnit): Promise<void> {
    if (unit.ended) return;
    for (const fire of unit.fires.values()) this.#c.io.ack(fire.pulled, '+WPI');
  }

  /** Ends a unit: settled fires are acknowledged, the others given back for another delivery. */
  async #end(unit: NatsUnit, settled: ReadonlySet<string>): Promise<void> {
    if (unit.ended) return;
    unit.ended = true;
    const back: Fire[] = [];
    for (const key of unit.claims.keys()) this.#open.delete(key);
    for (const [key, fire] of unit.fires) {
      this.#inHand.delete(fire.pulled.seq);
      if (settled.has(key)) this.#c.io.ack(fire.pulled, '+ACK');
      else back.push(fire);
    }
    if (back.length > 0)
      this.#c.logger.debug('nats store: claims given back', {
        count: back.length,
        settled: settled.size,
        keys: back.slice(0, 3).map((fire) => fire.key),
      });
    await Promise.all(back.map((fire) => this.#giveBack(fire)));
    // Fires held while their key was claimed here can go now.
    let waiting: number | undefined;
    for (const fire of this.#early.values())
      if (unit.fires.has(fire.key) && (waiting === undefined || fire.due < waiting)) waiting = fire.due;
    if (waiting !== undefined) this.#emit({ type: 'change', earliest: new Date(waiting) });
    this.#maybePurge();
  }

  /**
   * Gives a claim back: the fire is published again (a fresh delivery, count 1, marked interrupted when
   * the one held was) and the one held acknowledged. A crash between the two leaves both: the first met is claimed, the
   * other found stale or taken as the same claim's repeat.
   */
  async #giveBack(fire: Fire): Promise<void> {
    const { io, layout } = this.#c;
    try {
      // A crash seen on it and not recorded (the delivery gave it back instead) stays on the copy.
      await io.publish(layout.fire(fire.key), '', {
        headers: {
          [H.timer]: fire.id,
          [H.due]: String(fire.due),
          ...(fire.interrupted ? { [INTERRUPTED]: '1' } : {}),
        },
      });
      io.ack(fire.pulled, '+ACK');
    } catch (error) {
      // Not published (an outage): the consumer delivers it again now, counted as a redelivery.
      this.#c.logger.warn('nats store: giving a claim back failed; the fire is delivered again', { error });
      io.ack(fire.pulled, '-NAK');
    }
  }

  /** Purges fires below the consumer's acknowledgement floor (all acknowledged), now and then. */
  #maybePurge(): void {
    const now = performance.now();
    if (this.#purging || now - this.#lastPurge < PURGE_EVERY_MS || this.#c.io.closed) return;
    this.#lastPurge = now;
    const { io, layout, logger } = this.#c;
    this.#purging = (async () => {
      const floor = await this.#firesFloor();
      if (floor > 0) await io.purge(layout.storeStream, { filter: layout.fires, before: floor + 1 });
    })()
      .catch((error: unknown) => logger.debug?.('nats store: purging acknowledged fires failed', { error }))
      .finally(() => {
        this.#purging = undefined;
      });
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
    return listSchedules(this.#c, query);
  }

  async countSchedules(query: Omit<ListQuery, 'after' | 'select' | 'preview'>): Promise<number> {
    return countSchedules(this.#c, query);
  }

  async listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]> {
    return listDeadLetters(this.#c, query);
  }

  /** Answered from the timers that fired (see reads.ts `dueBacklog`): reads no schedule still waiting. */
  async dueBacklog(query: { now: Date; limit: number }): Promise<DueBacklog> {
    return dueBacklog(this.#c, await this.#firesFloor(), query);
  }

  /** The fires consumer's acknowledgement floor: every fire at or below it was acknowledged. */
  async #firesFloor(): Promise<number> {
    const { io, layout } = this.#c;
    try {
      return (await io.jsm.consumers.info(layout.storeStream, layout.firesConsumer)).ack_floor.stream_seq;
    } catch (error) {
      throw io.error(error, `read consumer ${layout.firesConsumer} of stream ${layout.storeStream}`);
    }
  }

  async countDeadLetters(query: { prefix?: string; limit: number }): Promise<number> {
    return countDeadLetters(this.#c, query);
  }

  #emit(event: WatchEvent): void {
    for (const listener of [...this.#listeners]) listener(event);
  }

  /**
   * Reports schedules as they fall due. A long poll of the fires consumer waits for fires (new ones, or
   * ones delivered again because their claim lapsed); each is held here like a fire a delivery pulled
   * early, and its due instant reported (`change`). Fires arrive `fireAheadMs` before they are due: while
   * they do, the watch takes every fire the consumer holds (up to {@link EARLY_CAP}) and goes on waiting,
   * so that a delivery at the due instant finds its fires in hand. A fire that is due already, or a
   * backlog, is left to the deliveries: the watch waits until one took what it holds. Each fire goes to
   * one process, so watching costs nothing per fire elsewhere.
   */
  watch(listener: (event: WatchEvent) => void): () => void {
    const { io, layout, logger } = this.#c;
    this.#listeners.add(listener);
    let stopped = false;
    const stopStatus = watchStatus(io, listener);
    const pull = async (max: number, waitMs: number) => {
      this.#listening += waitMs > 0 ? 1 : 0;
      try {
        const pulled = await io.pullNow(layout.storeStream, layout.firesConsumer, max, waitMs);
        this.#quiet = (pulled[pulled.length - 1]?.pending ?? 0) === 0;
        return pulled;
      } finally {
        this.#listening -= waitMs > 0 ? 1 : 0;
      }
    };
    void (async () => {
      let live = false;
      while (!stopped && !io.closed) {
        if (!live) {
          live = true;
          listener({ type: 'live' });
        }
        try {
          const held: Fire[] = [];
          let pulled = await pull(1, LONG_POLL_MS);
          for (;;) {
            // Held at once: a later pull that fails leaves them renewed and given back in time, not lapsing.
            for (const m of pulled) {
              const fire = this.#fireOf(m);
              if (!fire) continue;
              held.push(fire);
              this.#early.set(fire.pulled.seq, fire);
            }
            const last = pulled[pulled.length - 1];
            const room = EARLY_CAP - this.#early.size;
            const now = Date.now();
            if (stopped || !last?.pending || room <= 0 || held.some((f) => f.due <= now)) break;
            pulled = await pull(Math.min(last.pending, room, CLAIM_LIMIT), 0);
          }
          if (stopped) {
            // Taken after the watch ended (the poll was on its way): given back as fresh fires. A `-NAK`
            // would deliver them again with a count above 1, which reads as a claim whose process died.
            const left = held.filter((f) => this.#early.get(f.pulled.seq) === f);
            for (const fire of left) this.#early.delete(fire.pulled.seq);
            await Promise.all(left.map((fire) => this.#giveBack(fire)));
            return;
          }
          if (held.length === 0) continue;
          const earliest = Math.min(...held.map((f) => f.due));
          listener({ type: 'change', earliest: new Date(earliest) });
          const due = held.filter((f) => f.due <= Date.now());
          while (
            !stopped &&
            (due.some((f) => this.#early.get(f.pulled.seq) === f) || this.#early.size >= EARLY_CAP)
          )
            await sleep(HELD_LOOK_MS);
        } catch (error) {
          if (stopped || io.closed) return;
          logger.warn('nats store: waiting for fires failed; waiting again in a second', { error });
          live = false;
          listener({ type: 'lost' });
          await sleep(1000);
        }
      }
    })();
    const unwatch = async () => {
      stopped = true;
      this.#listeners.delete(listener);
      stopStatus();
    };
    this.#closing.push(unwatch);
    return () => void unwatch();
  }

  async close(): Promise<void> {
    clearInterval(this.#renewEarly);
    await Promise.allSettled(this.#closing.map((f) => f()));
    const early = [...this.#early.values()];
    this.#early.clear();
    await Promise.allSettled([...early.map((fire) => this.#giveBack(fire)), this.#purging]);
  }
}

/** Reports `lost` on a disconnection and `live` once reconnected (the subscription is resent then). */
function watchStatus(io: NatsIo, listener: (event: WatchEvent) => void): () => void {
  return onStatus(io.nc, ({ type }) => {
    if (type === 'disconnect') listener({ type: 'lost' });
    else if (type === 'reconnect') listener({ type: 'live' });
  });
}

/** The operations of one settlement, applied as one group (all or nothing). */
function settlementOps(s: Settlement): StoreOp[] {
  const { key, version } = s.schedule;
  const writes: StoreOp[] = [...s.writes];
  if (s.outcome === 'release') return writes;
  if (s.outcome === 'retry')
    return s.failure ? [{ op: 'fail', key, version, ...s.failure }, ...writes] : writes;
  const ops: StoreOp[] = [{ op: 'consume', key, version }];
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
