import {
  createBufferedDelivery,
  createBufferedTransaction,
  type DeadLetterRecord,
  type DeliveryTransaction,
  type DriverDeadLetterQuery,
  type DriverScheduleQuery,
  type DriverTransaction,
  type Event,
  type Schedule,
  type StoreDriver,
  type StoreOp,
} from '@duetime/core';
import type { Journal } from './journal.js';
import { type JournalRecord, type Snapshot, type State, toDeadLetter, toSchedule } from './state.js';

/**
 * Capability 1 over the journal. Reads answer from the caught-up replica; a transaction is buffered by
 * core's `createBufferedTransaction` and committed as one journal line, after its preconditions are
 * checked under the lock. Everything else (validation, retries on conflicts, paging, aggregates, local
 * change notifications) is done by core's `createStore` around this driver.
 */
export class JournalStoreDriver implements StoreDriver<undefined> {
  readonly #journal: Journal<JournalRecord, Snapshot>;
  readonly #state: State;

  constructor(journal: Journal<JournalRecord, Snapshot>, state: State) {
    this.#journal = journal;
    this.#state = state;
  }

  readonly #reads = {
    loadEvents: (id: string) => this.loadEvents(id),
    loadSchedule: (key: string) => this.loadSchedule(key),
    listSchedules: (query: DriverScheduleQuery) => this.listSchedules(query),
    loadDeadLetter: (key: string) => this.loadDeadLetter(key),
  };

  async begin(): Promise<DriverTransaction<undefined>> {
    return createBufferedTransaction({ reads: this.#reads, commit: (ops) => this.#commit(ops) });
  }

  /**
   * A delivery batch: the due schedules, read without claiming them (this adapter declares no exclusive
   * claims, so two dispatchers may run one processor and exactly one commits). Core keeps each schedule's
   * part as a group of operations; without a `commitGroups` of its own, each group is committed with
   * `commit`, one journal line each. A production adapter would write the whole batch in one line.
   */
  async deliver(now: Date, limit: number): Promise<DeliveryTransaction<undefined>> {
    const claimed = await this.dueSchedules(now, limit);
    return createBufferedDelivery({ claimed, reads: this.#reads, commit: (ops) => this.#commit(ops) });
  }

  /** All of a transaction's operations become one line, or the transaction fails with nothing written. */
  async #commit(ops: StoreOp[]): Promise<void> {
    await this.#journal.write(() => ({
      record: { type: 'commit', ops: this.#state.resolve(ops) },
      result: undefined,
    }));
  }

  loadEvents(aggregateId: string): Promise<Event[]> {
    return this.#journal.read(() => structuredClone(this.#state.events.get(aggregateId) ?? []));
  }

  loadSchedule(key: string): Promise<Schedule | undefined> {
    return this.#journal.read(() => {
      const s = this.#state.schedules.get(key);
      return s ? toSchedule(key, s) : undefined;
    });
  }

  listSchedules({ through, prefix, after, limit }: DriverScheduleQuery): Promise<Schedule[]> {
    return this.#journal.read(() => {
      const found: Schedule[] = [];
      const from = after ? { time: after.at, key: after.key } : undefined;
      for (const { time, key } of this.#state.byAt.after(from)) {
        if (through !== undefined && time > through.getTime()) break;
        // A literal prefix: startsWith knows no wildcards, so `%`, `_` and `\` match only themselves.
        if (prefix !== undefined && !key.startsWith(prefix)) continue;
        found.push(toSchedule(key, this.#state.schedules.get(key)!));
        if (found.length >= limit) break;
      }
      return found;
    });
  }

  dueSchedules(now: Date, limit: number): Promise<Schedule[]> {
    return this.#journal.read(() => {
      const due: Schedule[] = [];
      for (const { time, key } of this.#state.byDue.after()) {
        if (time > now.getTime() || due.length >= limit) break;
        due.push(toSchedule(key, this.#state.schedules.get(key)!));
      }
      return due;
    });
  }

  loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    return this.#journal.read(() => {
      const d = this.#state.deadLetters.get(key);
      return d ? toDeadLetter(d) : undefined;
    });
  }

  listDeadLetters({ prefix, after, limit }: DriverDeadLetterQuery): Promise<DeadLetterRecord[]> {
    return this.#journal.read(() =>
      [...this.#state.deadLetters.keys()]
        .filter(
          (key) => (prefix === undefined || key.startsWith(prefix)) && (after === undefined || key > after),
        )
        .sort()
        .slice(0, limit)
        .map((key) => toDeadLetter(this.#state.deadLetters.get(key)!)),
    );
  }

  nextDueAt(): Promise<Date | undefined> {
    return this.#journal.read(() => {
      const first = this.#state.byDue.first();
      return first ? new Date(first.time) : undefined;
    });
  }

  /**
   * The push channel: the file system tells us the journal changed, we catch up, and the replica reports
   * the schedules other instances put (with the earliest deadline among them).
   */
  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    const unlisten = this.#state.onRemotePut((earliest) => onChange({ earliest: new Date(earliest) }));
    let running = false;
    let again = false;
    const catchUp = async () => {
      if (running) {
        again = true;
        return;
      }
      running = true;
      do {
        again = false;
        await this.#journal.read(() => undefined).catch(() => undefined);
      } while (again);
      running = false;
    };
    const unwatch = this.#journal.watch(() => void catchUp());
    return () => {
      unwatch();
      unlisten();
    };
  }

  close(): Promise<void> {
    return this.#journal.close();
  }
}
