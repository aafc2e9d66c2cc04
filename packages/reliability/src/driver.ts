import type { Store } from '@duetime/core';
import { putMessage } from './effects.js';
import type { Random } from './random.js';

/** `committed`: the transaction returned. `uncertain`: it threw, so it may or may not have committed. */
export type Outcome = 'committed' | 'uncertain';

export interface PutOp {
  kind: 'put';
  key: string;
  /** Unique per put: what the delivered message carries. */
  put: string;
  at: number;
  outcome: Outcome;
  /** When its transaction returned or threw (ms): to place a loss in time. */
  doneAt?: number;
}

export interface CancelOp {
  kind: 'cancel';
  key: string;
  outcome: Outcome;
  doneAt?: number;
}

export type Op = PutOp | CancelOp;

/**
 * Every operation the driver made, per key, in commit order. The driver runs one transaction at a time,
 * so program order is commit order; this is what the audit derives the expected deliveries from.
 */
export class History {
  readonly byKey = new Map<string, Op[]>();
  readonly puts = new Map<string, PutOp>();

  add(op: Op): void {
    const ops = this.byKey.get(op.key);
    if (ops) ops.push(op);
    else this.byKey.set(op.key, [op]);
    if (op.kind === 'put') this.puts.set(op.put, op);
  }
}

export interface DriverStats {
  transactions: number;
  failedTransactions: number;
  puts: number;
  replaces: number;
  cancels: number;
  prefixCancels: number;
}

export interface DriverOptions {
  store: Store;
  random: Random;
  /** Deadlines are now + 0..spread ms (default 1,500). */
  spread?: number;
  /** Share of puts due a day later, which must stay pending and undelivered (default 0.04). */
  farFuture?: number;
  /** Told of every error a transaction threw. */
  onError?: (error: unknown) => void;
}

const GROUPS = 8;
const RECENT = 200;

/**
 * Adds, replaces and cancels schedules (one to three operations per transaction, now and then a whole
 * prefix), recording each operation and whether its transaction committed.
 */
export class ScheduleDriver {
  readonly history = new History();
  readonly stats: DriverStats = {
    transactions: 0,
    failedTransactions: 0,
    puts: 0,
    replaces: 0,
    cancels: 0,
    prefixCancels: 0,
  };
  readonly #store: Store;
  readonly #random: Random;
  readonly #spread: number;
  readonly #farFuture: number;
  readonly #onError: ((error: unknown) => void) | undefined;
  readonly #recent: string[] = [];
  #keys = 0;
  #puts = 0;

  constructor(options: DriverOptions) {
    this.#store = options.store;
    this.#random = options.random;
    this.#spread = options.spread ?? 1500;
    this.#farFuture = options.farFuture ?? 0.04;
    this.#onError = options.onError;
  }

  /** One transaction of random operations. */
  async step(): Promise<void> {
    const r = this.#random;
    const now = Date.now();
    const planned: Op[] = [];
    const calls: ((tx: Parameters<Parameters<Store['transact']>[0]>[0]) => Promise<unknown>)[] = [];
    if (this.#recent.length > 20 && r.chance(0.005)) {
      const prefix = `k/g${r.int(0, GROUPS - 1)}/`;
      for (const key of this.history.byKey.keys())
        if (key.startsWith(prefix)) planned.push({ kind: 'cancel', key, outcome: 'committed' });
      calls.push((tx) => tx.cancelSchedulePrefix(prefix));
      this.stats.prefixCancels++;
    } else {
      const count = r.chance(0.7) ? 1 : r.int(2, 3);
      for (let i = 0; i < count; i++) {
        const roll = r.next();
        if (roll < 0.5 || this.#recent.length < 5) {
          const key = `k/g${r.int(0, GROUPS - 1)}/${this.#keys++}`;
          this.#remember(key);
          planned.push(this.#put(key, now));
          this.stats.puts++;
        } else if (roll < 0.85) {
          planned.push(this.#put(r.pick(this.#recent), now));
          this.stats.replaces++;
        } else {
          planned.push({ kind: 'cancel', key: r.pick(this.#recent), outcome: 'committed' });
          this.stats.cancels++;
        }
      }
      for (const op of planned)
        calls.push((tx) =>
          op.kind === 'put'
            ? tx.schedule(op.key, new Date(op.at), putMessage(op.key, op.put))
            : tx.cancelSchedule(op.key),
        );
    }
    this.stats.transactions++;
    try {
      await this.#store.transact(async (tx) => {
        for (const call of calls) await call(tx);
      });
    } catch (error) {
      this.#onError?.(error);
      this.stats.failedTransactions++;
      for (const op of planned) op.outcome = 'uncertain';
    }
    const doneAt = Date.now();
    for (const op of planned) {
      op.doneAt = doneAt;
      this.history.add(op);
    }
  }

  /** Runs steps until `signal` aborts, pausing about `paceMs` between them. */
  async run(signal: AbortSignal, paceMs: number): Promise<void> {
    while (!signal.aborted) {
      await this.step();
      const pause = this.#random.int(0, 2 * paceMs);
      if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  #put(key: string, now: number): PutOp {
    const far = this.#random.chance(this.#farFuture);
    const at = far ? now + 86_400_000 : now + this.#random.int(0, this.#spread);
    return { kind: 'put', key, put: `p${this.#puts++}`, at, outcome: 'committed' };
  }

  #remember(key: string): void {
    this.#recent.push(key);
    if (this.#recent.length > RECENT) this.#recent.shift();
  }
}
