import {
  type BufferedReads,
  createBufferedTransaction,
  type DriverTransaction,
  type Event,
  type Logger,
  type Message,
  type Schedule,
  type StoreOp,
} from '@duetime/core';

/** What claiming a schedule version gave: the schedule (claimed), or why not. */
export type ClaimOutcome = { claimed: Schedule } | 'stale' | 'taken';

/** The driver calls a claiming transaction needs. */
export interface ClaimDriver {
  claim(key: string, version: number, value: string, ttlMs: number): Promise<ClaimOutcome>;
  renewClaims(keys: readonly string[], value: string, ttlMs: number): Promise<number>;
  releaseClaims(keys: readonly string[], value: string): Promise<void>;
  commit(ops: StoreOp[], claims: { value: string; keys: ReadonlySet<string> }): Promise<void>;
}

export interface ClaimingTransactionOptions {
  driver: ClaimDriver;
  reads: BufferedReads;
  /** Unique per transaction. */
  claimValue: string;
  claimTtl: number;
  logger: Logger;
  /** Called once when the transaction ends (commit, rollback or abandon). */
  onEnd(): void;
}

/**
 * A buffered transaction whose `consume` first claims the schedule version (`SET NX PX` on a claim key, in
 * the `claim` script, which also checks the version), so two dispatchers never run the processor for the
 * same schedule at once. The claim is renewed every third of its time to live while the transaction is
 * open, deleted by the commit script together with the consumption, and released on rollback. A claim
 * that outlives its holder (a killed process) expires after its time to live. Correctness never rests on
 * the claim: the commit still checks the version.
 */
export class ClaimingTransaction implements DriverTransaction<undefined> {
  readonly #inner: DriverTransaction<undefined>;
  readonly #o: ClaimingTransactionOptions;
  readonly #claimed = new Set<string>();
  /** Schedules just read by the claim script, so the buffered consume does not read them again. */
  readonly #prefetched = new Map<string, Schedule>();
  #renewal: NodeJS.Timeout | undefined;
  #ended = false;

  constructor(options: ClaimingTransactionOptions) {
    this.#o = options;
    this.#inner = createBufferedTransaction({
      reads: {
        loadEvents: (id) => options.reads.loadEvents(id),
        loadSchedule: async (key) => {
          const prefetched = this.#prefetched.get(key);
          return prefetched ? structuredClone(prefetched) : options.reads.loadSchedule(key);
        },
        listSchedules: (query) => options.reads.listSchedules(query),
      },
      commit: (ops) => options.driver.commit(ops, { value: options.claimValue, keys: this.#claimed }),
    });
  }

  get sql(): undefined {
    return undefined;
  }

  loadEvents(aggregateId: string): Promise<Event[]> {
    return this.#inner.loadEvents(aggregateId);
  }

  loadSchedule(key: string): Promise<Schedule | undefined> {
    return this.#inner.loadSchedule(key);
  }

  appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void> {
    return this.#inner.appendEvents(aggregateId, expectedSequence, events);
  }

  putSchedule(key: string, at: Date, message: Message): Promise<void> {
    return this.#inner.putSchedule(key, at, message);
  }

  deleteSchedule(key: string): Promise<boolean> {
    return this.#inner.deleteSchedule(key);
  }

  deletePrefix(prefix: string): Promise<number> {
    return this.#inner.deletePrefix(prefix);
  }

  async consume(key: string, version: number): Promise<boolean> {
    const outcome = await this.#o.driver.claim(key, version, this.#o.claimValue, this.#o.claimTtl);
    if (outcome === 'stale' || outcome === 'taken') return false;
    this.#claimed.add(key);
    this.#prefetched.set(key, outcome.claimed);
    this.#keepRenewing();
    let consumed = false;
    try {
      consumed = await this.#inner.consume(key, version);
    } finally {
      this.#prefetched.delete(key);
      if (!consumed) {
        this.#claimed.delete(key);
        await this.#release([key]);
      }
    }
    return consumed;
  }

  async commit(): Promise<void> {
    try {
      await this.#inner.commit();
      this.#claimed.clear(); // the commit script deleted them with the consumption
    } finally {
      await this.#end();
    }
  }

  async rollback(): Promise<void> {
    try {
      await this.#inner.rollback();
    } finally {
      await this.#end();
    }
  }

  /** Stops renewing without waiting (the backend is closing); the claims expire on their own. */
  abandon(): void {
    this.#stopRenewing();
    this.#claimed.clear();
    this.#finish();
  }

  async #end(): Promise<void> {
    this.#stopRenewing();
    const left = [...this.#claimed];
    this.#claimed.clear();
    this.#finish();
    if (left.length > 0) await this.#release(left);
  }

  #finish(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#o.onEnd();
  }

  async #release(keys: string[]): Promise<void> {
    try {
      await this.#o.driver.releaseClaims(keys, this.#o.claimValue);
    } catch (error) {
      // The claims expire by themselves; the schedule is only held back until then.
      this.#o.logger.debug('could not release delivery claims; they will expire', { keys, error });
    }
  }

  #keepRenewing(): void {
    if (this.#renewal || this.#ended) return;
    const every = Math.max(10, Math.floor(this.#o.claimTtl / 3));
    const renew = () => {
      this.#renewal = setTimeout(async () => {
        if (this.#claimed.size === 0 || this.#ended) return;
        try {
          await this.#o.driver.renewClaims([...this.#claimed], this.#o.claimValue, this.#o.claimTtl);
        } catch (error) {
          this.#o.logger.debug('could not renew delivery claims', { error });
        }
        if (!this.#ended && this.#renewal) renew();
      }, every);
      this.#renewal.unref();
    };
    renew();
  }

  #stopRenewing(): void {
    clearTimeout(this.#renewal);
    this.#renewal = undefined;
  }
}
