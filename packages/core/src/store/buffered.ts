import { ClosedError } from '../errors.js';
import type { DriverScheduleQuery, DriverTransaction, StoreOp } from './driver.js';
import type { Event, Message, Schedule } from './types.js';

/** The reads a buffered transaction needs from committed state. */
export interface BufferedReads {
  loadEvents(aggregateId: string): Promise<Event[]>;
  loadSchedule(key: string): Promise<Schedule | undefined>;
  listSchedules(query: DriverScheduleQuery): Promise<Schedule[]>;
}

export interface BufferedTransactionOptions<Sql> {
  reads: BufferedReads;
  /**
   * Applies all operations atomically, in order, or none. Must check each `append`'s expected sequence
   * (ConflictError `aggregate`) and each `consume`'s version (ConflictError `schedule`) at commit time.
   * Not called when there are no operations.
   */
  commit(ops: StoreOp[]): Promise<void>;
  /** Called once when the transaction ends without committing. */
  rollback?(): Promise<void>;
  sql?: Sql;
  clock?: () => number;
}

type Overlay = { kind: 'put'; schedule: Schedule } | { kind: 'deleted' };

const PAGE = 1000;

/**
 * A {@link DriverTransaction} for stores without interactive transactions (key-value stores, logs). It
 * records the operations and answers reads from committed state overlaid with its own changes, then hands
 * the operations to one atomic `commit`. Optimistic: aggregate appends and schedule consumptions carry
 * their preconditions to the commit, where the driver checks them.
 */
export function createBufferedTransaction<Sql = undefined>(
  options: BufferedTransactionOptions<Sql>,
): DriverTransaction<Sql> {
  return new BufferedTransaction(options);
}

class BufferedTransaction<Sql> implements DriverTransaction<Sql> {
  readonly #reads: BufferedReads;
  readonly #options: BufferedTransactionOptions<Sql>;
  readonly #ops: StoreOp[] = [];
  readonly #overlay = new Map<string, Overlay>();
  readonly #deletedPrefixes: string[] = [];
  readonly #appended = new Map<string, Event[]>();
  #finished = false;

  constructor(options: BufferedTransactionOptions<Sql>) {
    this.#options = options;
    this.#reads = options.reads;
  }

  get sql(): Sql {
    return this.#options.sql as Sql;
  }

  #open(): void {
    if (this.#finished) throw new ClosedError('transaction');
  }

  #underDeletedPrefix(key: string): boolean {
    return this.#deletedPrefixes.some((p) => key.startsWith(p));
  }

  async #committed(key: string): Promise<Schedule | undefined> {
    if (this.#underDeletedPrefix(key)) return undefined;
    return this.#reads.loadSchedule(key);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    this.#open();
    const committed = await this.#reads.loadEvents(aggregateId);
    return [...committed, ...(this.#appended.get(aggregateId) ?? [])];
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    this.#open();
    const local = this.#overlay.get(key);
    if (local) return local.kind === 'put' ? structuredClone(local.schedule) : undefined;
    return this.#committed(key);
  }

  async appendEvents(aggregateId: string, expectedSequence: number, events: Event[]): Promise<void> {
    this.#open();
    this.#ops.push({ op: 'append', aggregateId, expectedSequence, events });
    this.#appended.set(aggregateId, [...(this.#appended.get(aggregateId) ?? []), ...events]);
  }

  async putSchedule(key: string, at: Date, message: Message): Promise<void> {
    this.#open();
    this.#ops.push({ op: 'put', key, at, message });
    // The version is assigned at commit; until then the transaction sees its own schedule as version 0.
    this.#overlay.set(key, {
      kind: 'put',
      schedule: { key, at, message, version: 0, attempts: 0, dueAt: at },
    });
  }

  async deleteSchedule(key: string): Promise<boolean> {
    this.#open();
    const local = this.#overlay.get(key);
    const existed = local ? local.kind === 'put' : (await this.#committed(key)) !== undefined;
    this.#ops.push({ op: 'delete', key });
    this.#overlay.set(key, { kind: 'deleted' });
    return existed;
  }

  async deletePrefix(prefix: string): Promise<number> {
    this.#open();
    let count = 0;
    if (!this.#underDeletedPrefix(prefix)) {
      let after: DriverScheduleQuery['after'];
      for (;;) {
        const page = await this.#reads.listSchedules({ prefix, limit: PAGE, ...(after ? { after } : {}) });
        for (const s of page) {
          if (!this.#overlay.has(s.key) && !this.#underDeletedPrefix(s.key)) count++;
        }
        const last = page.at(-1);
        if (page.length < PAGE || !last) break;
        after = { at: last.at.getTime(), key: last.key };
      }
    }
    for (const [key, entry] of this.#overlay) {
      if (!key.startsWith(prefix)) continue;
      if (entry.kind === 'put') count++;
      this.#overlay.set(key, { kind: 'deleted' });
    }
    this.#deletedPrefixes.push(prefix);
    this.#ops.push({ op: 'deletePrefix', prefix });
    return count;
  }

  async consume(key: string, version: number): Promise<boolean> {
    this.#open();
    if (this.#overlay.has(key)) return false;
    const current = await this.#committed(key);
    if (!current || current.version !== version) return false;
    this.#ops.push({ op: 'consume', key, version });
    this.#overlay.set(key, { kind: 'deleted' });
    return true;
  }

  async commit(): Promise<void> {
    this.#open();
    this.#finished = true;
    if (this.#ops.length > 0) await this.#options.commit(this.#ops);
  }

  async rollback(): Promise<void> {
    if (this.#finished) return;
    this.#finished = true;
    await this.#options.rollback?.();
  }
}
