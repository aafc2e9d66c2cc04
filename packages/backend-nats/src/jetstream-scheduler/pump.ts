import { type Clock, DueHeap, type HeapItem, type Logger, sleep } from '@duetime/core';
import {
  DeliverPolicy,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { headers, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { isWrongLastSequence } from '../errors.js';
import { parseCron6 } from './cron.js';
import { deleteOnSubject, deleteSequence } from './delete.js';
import { H } from './headers.js';
import { openPumpLease, type PumpLease } from './lease.js';
import type { SubjectLayout } from './subjects.js';

export interface PumpOptions {
  connection: NatsConnection;
  stream: string;
  layout: SubjectLayout;
  /** Which definitions this pump fires: one-shot timers, cron definitions, or both. */
  kinds: { once: boolean; cron: boolean };
  owner: string;
  leaseTtlMs: number;
  /** A cron tick later than this when the pump reaches it is skipped (kept below the dedup window). */
  missedTickGraceMs: number;
  /** Definitions fired at once, at most. */
  concurrency: number;
  clock: Clock;
  logger: Logger;
}

/** A pending definition as the pump tracks it: only what is needed to find it again when it falls due. */
interface DueEntry extends HeapItem {
  /** When to look at it (epoch ms): its due instant, or a retry time after a failure. */
  due: number;
  /** The definition's stream sequence. */
  seq: number;
  kind: 'once' | 'cron';
}

/** How long to wait before looking at a definition again after a failure. */
const RETRY_MS = 500;
/** Longest wait between two looks at the heap when nothing wakes the pump. */
const IDLE_MS = 1_000;

/**
 * The emulated scheduler for servers without ADR-51 message schedules: one process per stream, elected by
 * the pump's lease ({@link openPumpLease}: the package's NATS leases held by core's `LeaseManager`),
 * follows the definitions with ordered consumers, keeps a heap of (due, sequence), and fires each due
 * definition to its target fire subject.
 *
 * Every candidate asks for the lease every `leaseTtl / 3`. A term of pumping ({@link PumpRun}) belongs to
 * one holding of the lease: it fires only while that holding is valid, and stops when it ends (lost,
 * expired or released); a later holding starts a new term, which reads the definitions afresh.
 *
 * Crash safety: the fire is published first, with `Nats-Msg-Id` derived from the definition and its due
 * instant; only then is a one-shot definition deleted or a cron definition advanced (conditionally on its
 * sequence). A crash between the two leaves the definition in place; the next pump fires it again with the
 * same id, which the stream drops inside its dedup window. A cron tick found later than `missedTickGrace`
 * (always below the window) is skipped instead, so a cron tick is never fired twice; a one-shot timer is
 * always fired, however late, so it is never lost.
 *
 * Definitions are removed message by message, never purged or rolled up (see delete.ts): on NATS 2.9 a
 * subject purge would move the follower past definitions it has not read yet, and they would never fire.
 */
export class EmulatedPump {
  readonly #o: PumpOptions;
  readonly #abort = new AbortController();
  #lease: PumpLease | undefined;
  #campaign: Promise<void> | undefined;
  #run: PumpRun | undefined;
  #fired = 0;
  #stopped = false;

  constructor(options: PumpOptions) {
    this.#o = options;
  }

  /** Whether this process currently runs the pump: it holds the lease and the holding is still valid. */
  get isLeader(): boolean {
    return this.#lease?.lease.held ?? false;
  }

  /** Messages this process has fired so far (duplicates the stream dropped included). */
  get firedCount(): number {
    return this.#fired;
  }

  start(): void {
    this.#campaign ??= this.#candidate();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#abort.abort();
    await this.#campaign;
    const run = this.#run;
    this.#run = undefined;
    await run?.stop();
    const pumpLease = this.#lease;
    if (!pumpLease) return;
    // Released, not left to expire: the next candidate takes over at once.
    await pumpLease.lease.release().catch((error: unknown) => {
      this.#o.logger.warn('jetstream scheduler: could not release the pump lease; it expires by itself', {
        error,
      });
    });
    pumpLease.lease.close();
    pumpLease.io.close();
  }

  /** Asks for the lease every `ttl / 3` (a no-op while held: core's LeaseManager renews it) until stopped. */
  async #candidate(): Promise<void> {
    const { clock, logger } = this.#o;
    const period = Math.max(10, Math.floor(this.#o.leaseTtlMs / 3));
    const signal = this.#abort.signal;
    while (!signal.aborted) {
      try {
        this.#lease ??= await openPumpLease({
          connection: this.#o.connection,
          stream: this.#o.stream,
          layout: this.#o.layout,
          owner: this.#o.owner,
          ttlMs: this.#o.leaseTtlMs,
          clock,
          logger,
        });
        if (!signal.aborted && (await this.#lease.lease.acquire())) this.#startRun();
      } catch (error) {
        if (!signal.aborted) logger.warn('jetstream scheduler: pump lease check failed', { error });
      }
      await sleep(clock, period, signal);
    }
  }

  /** Starts a term for the current holding, unless one runs; it stops when the holding ends. */
  #startRun(): void {
    const lease = this.#lease?.lease;
    if (this.#stopped || this.#run || !lease?.held) return;
    const holding = lease.signal; // aborted when this holding ends, whatever the reason
    const run: PumpRun = new PumpRun(
      this.#o,
      () => lease.held && !holding.aborted,
      () => this.#fired++,
      () => {
        // The term's view of the definitions broke: a new term, while the holding lasts.
        if (this.#run !== run) return;
        this.#run = undefined;
        void run.stop().then(() => {
          if (!holding.aborted) this.#o.clock.setTimer(RETRY_MS, () => this.#startRun());
        });
      },
    );
    this.#run = run;
    this.#o.logger.info('jetstream scheduler: this process now runs the pump', { owner: this.#o.owner });
    holding.addEventListener(
      'abort',
      () => {
        if (this.#run !== run) return;
        this.#o.logger.info('jetstream scheduler: this process no longer runs the pump', {
          owner: this.#o.owner,
          reason: (holding.reason as { reason?: unknown } | undefined)?.reason,
        });
        this.#run = undefined;
        void run.stop();
      },
      { once: true },
    );
    run.start();
  }
}

/** One term of leadership: from acquiring the lease to losing or releasing it. */
class PumpRun {
  readonly #o: PumpOptions;
  readonly #isLeader: () => boolean;
  readonly #onFired: () => void;
  readonly #onBroken: () => void;
  readonly #js: JetStreamClient;
  #jsm: JetStreamManager | undefined;
  readonly #heap = new DueHeap<DueEntry>();
  readonly #abort = new AbortController();
  readonly #stoppers: Array<() => Promise<void>> = [];
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;

  constructor(options: PumpOptions, isLeader: () => boolean, onFired: () => void, onBroken: () => void) {
    this.#o = options;
    this.#isLeader = isLeader;
    this.#onFired = onFired;
    this.#onBroken = onBroken;
    this.#js = jetstream(options.connection);
  }

  start(): void {
    this.#loop = this.#main().catch((error) => {
      if (this.#abort.signal.aborted) return;
      this.#o.logger.warn('jetstream scheduler: pump term failed; starting a new one', { error });
      this.#onBroken();
    });
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    this.#wake?.();
    await Promise.allSettled(this.#stoppers.map((stop) => stop()));
    await this.#loop;
  }

  async #main(): Promise<void> {
    this.#jsm = await jetstreamManager(this.#o.connection);
    const { layout, kinds } = this.#o;
    if (kinds.once) await this.#follow(layout.onceAll, 'once');
    if (kinds.cron) await this.#follow(layout.cronAll, 'cron');
    const signal = this.#abort.signal;
    const inflight = new Set<Promise<void>>();
    while (!signal.aborted) {
      const top = this.#heap.peek();
      const now = this.#o.clock.now();
      const leader = this.#isLeader();
      if (top && top.due <= now && leader && inflight.size < this.#o.concurrency) {
        this.#heap.pop();
        const task: Promise<void> = this.#process(top).finally(() => {
          inflight.delete(task);
          this.#wake?.();
        });
        inflight.add(task);
        continue;
      }
      if (inflight.size >= this.#o.concurrency) await Promise.race(inflight);
      else await this.#sleep(top && leader ? Math.min(top.due - now, IDLE_MS) : IDLE_MS);
    }
    await Promise.allSettled(inflight);
  }

  /** Follows one kind of definition from the start of the stream with an ordered consumer. */
  async #follow(filter: string, kind: DueEntry['kind']): Promise<void> {
    const consumer = await this.#js.consumers.get(this.#o.stream, {
      filter_subjects: filter,
      deliver_policy: DeliverPolicy.All,
    });
    const messages = await consumer.consume();
    this.#stoppers.push(async () => {
      await messages.close();
      // An ordered consumer outlives its reader by five minutes unless deleted.
      await consumer.delete().catch(() => undefined);
    });
    void (async () => {
      for await (const m of messages) this.#track(m, kind);
    })()
      .catch((error) => {
        if (!this.#abort.signal.aborted)
          this.#o.logger.warn('jetstream scheduler: pump lost its view of definitions', { error });
      })
      .finally(() => {
        if (!this.#abort.signal.aborted) this.#onBroken();
      });
  }

  #track(m: JsMsg, kind: DueEntry['kind']): void {
    if (m.headers?.has(H.schedule)) return; // the server runs this one
    const due = Number(m.headers?.get(H.due));
    if (!Number.isFinite(due)) {
      this.#o.logger.warn('jetstream scheduler: definition without a due instant ignored', {
        subject: m.subject,
        seq: m.seq,
      });
      return;
    }
    const top = this.#heap.peek();
    this.#heap.upsert({ due, seq: m.seq, kind, heapIndex: -1 });
    if (!top || due < top.due) this.#wake?.();
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const cancel = this.#o.clock.setTimer(Math.max(0, ms), () => {
        this.#wake = undefined;
        resolve();
      });
      this.#wake = () => {
        cancel();
        this.#wake = undefined;
        resolve();
      };
    });
  }

  async #process(entry: DueEntry): Promise<void> {
    try {
      const jsm = this.#jsm as JetStreamManager;
      const msg = await jsm.streams.getMessage(this.#o.stream, { seq: entry.seq });
      if (!msg) return; // already fired, replaced or cancelled
      if (!this.#isLeader()) {
        this.#heap.upsert(entry); // popped, so out of the heap: it goes back in
        return;
      }
      if (await this.#superseded(entry, msg.subject)) return;
      if (entry.kind === 'once') await this.#fireOnce(entry.seq, msg.subject, msg.header, msg.data);
      else await this.#fireCron(entry.seq, msg.subject, msg.header, msg.data);
    } catch (error) {
      if (this.#abort.signal.aborted) return;
      this.#o.logger.warn('jetstream scheduler: pump will retry a definition', { seq: entry.seq, error });
      entry.due = this.#o.clock.now() + RETRY_MS;
      this.#heap.upsert(entry);
    }
  }

  /**
   * A cron subject, and an `atId` subject (timer id starting with `=`), may hold an older definition under
   * a newer one (definitions are never rolled up: see delete.ts): the newer replaces it, so the older is
   * deleted unfired. Other timer subjects hold one definition each.
   */
  async #superseded(entry: DueEntry, subject: string): Promise<boolean> {
    if (entry.kind === 'once' && !isAtIdSubject(subject)) return false;
    const jsm = this.#jsm as JetStreamManager;
    const last = await jsm.streams.getMessage(this.#o.stream, { last_by_subj: subject });
    if (!last || last.seq === entry.seq) return false;
    await this.#delete(entry.seq);
    return true;
  }

  async #delete(seq: number): Promise<void> {
    await deleteSequence(this.#jsm as JetStreamManager, this.#o.stream, seq);
  }

  async #fireOnce(seq: number, subject: string, def: MsgHdrs, data: Uint8Array): Promise<void> {
    const due = def.get(H.due);
    const timer = def.get(H.timer);
    const out = headers();
    out.set(H.timer, timer);
    out.set(H.due, due);
    await this.#js.publish(def.get(H.target), data, { headers: out, msgID: `o:${timer}@${due}` });
    this.#onFired();
    // An `atId` subject may also hold older definitions this one replaced: they go first, so that none of
    // them is ever the newest left on the subject (it would fire).
    if (isAtIdSubject(subject))
      await deleteOnSubject(this.#jsm as JetStreamManager, this.#o.stream, subject, seq);
    await this.#delete(seq);
  }

  async #fireCron(seq: number, subject: string, def: MsgHdrs, data: Uint8Array): Promise<void> {
    const due = Number(def.get(H.due));
    const name = def.get(H.cron);
    const expr = def.get(H.cronExpr);
    const now = this.#o.clock.now();
    if (now - due <= this.#o.missedTickGraceMs) {
      const out = headers();
      out.set(H.cron, name);
      out.set(H.cronExpr, expr);
      out.set(H.due, String(due));
      await this.#js.publish(def.get(H.target), data, { headers: out, msgID: `c:${name}@${due}` });
      this.#onFired();
    }
    const next = parseCron6(expr).next(new Date(Math.max(now, due)));
    const advanced = headers();
    for (const [k, v] of def) if (k.startsWith('Duetime-')) for (const value of v) advanced.append(k, value);
    advanced.set(H.due, String(next?.getTime() ?? ''));
    if (next) {
      // The advanced definition goes in only if this one is still the newest; then this one is deleted (a
      // crash in between leaves both, and the older is deleted unfired when it falls due: #superseded).
      try {
        await this.#js.publish(subject, data, { headers: advanced, expect: { lastSubjectSequence: seq } });
      } catch (error) {
        if (!isWrongLastSequence(error)) throw error; // replaced meanwhile: the new definition is followed
      }
    }
    await this.#delete(seq);
  }
}

/** Whether a one-shot definition's subject names an `atId` timer (its id token starts with `=`). */
function isAtIdSubject(subject: string): boolean {
  return subject.slice(subject.lastIndexOf('.') + 1).startsWith('=');
}
