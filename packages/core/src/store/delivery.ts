import type { Claimed, Settlement, StoreAdapter, Unit } from '../backend/contract.js';
import type { Clock } from '../clock.js';
import type { Logger } from '../logger.js';
import { CoreTransaction } from './transaction.js';
import type { StoreChange } from './types.js';
import { type Work, workOf } from './work.js';

/** What a part left behind when it succeeded. */
export interface PartResult {
  /** Whether it scheduled anything, and the earliest deadline it scheduled. */
  scheduled: boolean;
  earliest: number | undefined;
}

/**
 * One delivery: a unit that claimed due schedules, the parts run in it (one per processor, each undone
 * alone when it throws), and the settlements core decided, applied in one commit. Owned by the store,
 * which opens it (see the store's `openDelivery`); the dispatcher decides what happens to each schedule.
 */
export class Delivery<Sql = unknown> {
  readonly claimed: readonly Claimed[];
  // biome-ignore lint/suspicious/noExplicitAny: any adapter's unit
  readonly #adapter: StoreAdapter<Sql, any>;
  // biome-ignore lint/suspicious/noExplicitAny: any adapter's unit
  readonly #work: Work<Sql, any>;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #announce: (change: Omit<StoreChange, 'remote'>) => void;
  readonly #settlements: Settlement[] = [];
  #renewal: NodeJS.Timeout | undefined;
  #ended = false;
  #scheduled = false;
  #earliest: number | undefined;

  constructor(
    adapter: StoreAdapter<Sql, Unit<Sql>>,
    unit: Unit<Sql>,
    clock: Clock,
    logger: Logger,
    announce: (change: Omit<StoreChange, 'remote'>) => void,
  ) {
    this.#adapter = adapter;
    this.#work = workOf(adapter, unit);
    this.claimed = unit.claimed ?? [];
    this.#clock = clock;
    this.#logger = logger;
    this.#announce = announce;
    if (adapter.renew && this.claimed.length > 0) this.#keepRenewing(adapter.renewEveryMs!);
  }

  /** Whether the adapter runs parts in savepoints of a database transaction (it has `sql`). */
  get interactive(): boolean {
    return this.#adapter.write !== undefined;
  }

  /**
   * Runs `fn` as one part: it gets a {@link CoreTransaction} of its own; everything it writes belongs to the
   * part, and when it throws, all of it is undone and the error rethrown (the delivery stays usable).
   * Returns the part's writes for its settlement (buffered adapters; interactive ones have applied them).
   */
  async part(
    fn: (tx: CoreTransaction<Sql>) => Promise<void>,
  ): Promise<{ writes: Settlement['writes'] } & PartResult> {
    const work = this.#work;
    const writes = work.openList();
    const mark = work.mark();
    const tx = new CoreTransaction<Sql>(work, this.#clock);
    const run = async () => {
      await fn(tx);
      tx.finish();
      await work.flush();
    };
    try {
      if (this.#adapter.part) await this.#adapter.part(this.#work.unit, run);
      else await run();
    } catch (error) {
      tx.finish();
      work.undo(mark);
      throw error;
    }
    return { writes: this.interactive ? [] : writes, ...this.#noteScheduled(tx) };
  }

  /** Whether {@link together} may run processors at once on this delivery's unit (see the adapter's `concurrent`). */
  get concurrent(): boolean {
    return this.interactive && this.#adapter.concurrent?.(this.#work.unit) === true;
  }

  /**
   * Runs every function of `fns` at once, each with a {@link CoreTransaction} of its own, as one part of an
   * interactive adapter (one savepoint for all of them): when any throws, the others are waited for, all
   * of their writes are undone together and the first error is rethrown (the delivery stays usable).
   * Interactive adapters only: their writes apply as they go, so no part needs a list of its own.
   */
  async together(fns: readonly ((tx: CoreTransaction<Sql>) => Promise<void>)[]): Promise<PartResult[]> {
    if (!this.concurrent)
      throw new TypeError('Delivery.together needs a unit that takes concurrent statements');
    const work = this.#work;
    const mark = work.mark();
    const txs = fns.map(() => new CoreTransaction<Sql>(work, this.#clock));
    const run = async () => {
      const ran = await Promise.allSettled(
        fns.map(async (fn, i) => {
          await fn(txs[i]!);
          txs[i]!.finish();
        }),
      );
      const failure = ran.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failure) throw failure.reason;
      await work.flush();
    };
    try {
      if (this.#adapter.part) await this.#adapter.part(this.#work.unit, run);
      else await run();
    } catch (error) {
      for (const tx of txs) tx.finish();
      work.undo(mark);
      throw error;
    }
    return txs.map((tx) => this.#noteScheduled(tx));
  }

  /** What a finished part's transaction scheduled, noted for the commit's change notification. */
  #noteScheduled(tx: CoreTransaction<Sql>): PartResult {
    if (tx.scheduled) {
      this.#scheduled = true;
      if (tx.earliest !== undefined && (this.#earliest === undefined || tx.earliest < this.#earliest))
        this.#earliest = tx.earliest;
    }
    return { scheduled: tx.scheduled, earliest: tx.earliest };
  }

  /** Records how one claimed schedule ends; applied by {@link commit}. */
  settle(settlement: Settlement): void {
    this.#settlements.push(settlement);
    if (settlement.next) this.#schedules(settlement.next.at.getTime());
    if (settlement.outcome === 'retry' && settlement.failure)
      this.#schedules(settlement.failure.dueAt.getTime());
  }

  #schedules(at: number): void {
    this.#scheduled = true;
    if (this.#earliest === undefined || at < this.#earliest) this.#earliest = at;
  }

  /**
   * Applies every settlement (a claimed schedule without one is released) in one commit. Returns the
   * settlements the adapter left out, by key. Tells the store's listeners when it scheduled something.
   */
  async commit(): Promise<ReadonlyMap<string, Error>> {
    this.#end();
    const settled = new Set(this.#settlements.map((s) => s.schedule.key));
    for (const schedule of this.claimed)
      if (!settled.has(schedule.key)) this.#settlements.push({ schedule, outcome: 'release', writes: [] });
    const rejected =
      (await this.#adapter.commit(this.#work.unit, { writes: [], settlements: this.#settlements })) ??
      new Map<string, Error>();
    if (this.#scheduled)
      this.#announce(this.#earliest === undefined ? {} : { earliest: new Date(this.#earliest) });
    return rejected;
  }

  /** Ends the delivery without applying anything: every claimed schedule stays as it was. */
  async rollback(): Promise<void> {
    if (this.#ended) return;
    this.#end();
    await this.#adapter.rollback(this.#work.unit);
  }

  #end(): void {
    this.#ended = true;
    clearTimeout(this.#renewal);
    this.#renewal = undefined;
  }

  #keepRenewing(every: number): void {
    const renew = async () => {
      if (this.#ended) return;
      try {
        await this.#adapter.renew!(this.#work.unit);
      } catch (error) {
        this.#logger.debug('renewing delivery claims failed; they may lapse', { error });
      }
      if (!this.#ended) this.#arm(renew, every);
    };
    this.#arm(renew, every);
  }

  #arm(renew: () => Promise<void>, every: number): void {
    // Real time: a claim lapses on the backend's clock, whatever the dispatcher's clock says.
    this.#renewal = setTimeout(() => void renew(), every);
    this.#renewal.unref();
  }
}
