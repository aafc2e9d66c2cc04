import { ClosedError, ConflictError, DuetimeError } from '../errors.js';
import type {
  DeliveryFailure,
  DeliveryTransaction,
  DriverScheduleQuery,
  DriverTransaction,
  StoreOp,
} from './driver.js';
import type { StoredRecurrence } from './recurrence.js';
import type { DeadLetterRecord, Event, Message, Schedule } from './types.js';

/** The reads a buffered transaction needs from committed state. */
export interface BufferedReads {
  loadEvents(aggregateId: string): Promise<Event[]>;
  loadSchedule(key: string): Promise<Schedule | undefined>;
  listSchedules(query: DriverScheduleQuery): Promise<Schedule[]>;
  loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined>;
}

export interface BufferedTransactionOptions<Sql> {
  reads: BufferedReads;
  /**
   * Applies all operations atomically, in order, or none. Must check each `append`'s expected sequence
   * (ConflictError `aggregate`) and each `consume`'s version (ConflictError `schedule`) at commit time.
   * Not called when there are no operations.
   */
  commit(ops: StoreOp[]): Promise<void>;
  /**
   * Optional, for deliveries: applies several groups in one atomic call, in order, each one all or nothing
   * and independently of the others (a group whose precondition fails is left out, later groups still
   * apply and see the state the applied ones left). Returns, per group, `undefined` when applied or the
   * error that kept it out: usually a {@link ConflictError}; any other error is reported for that group
   * alone (the dispatcher logs it and the schedule stays pending). Without it, a delivery commits its
   * groups one `commit` each.
   */
  commitGroups?(groups: StoreOp[][]): Promise<(Error | undefined)[]>;
  /** Called once when the transaction ends without committing anything (a rollback, or nothing to commit). */
  rollback?(): Promise<void>;
  sql?: Sql;
}

export interface BufferedDeliveryOptions<Sql> extends BufferedTransactionOptions<Sql> {
  /** The schedules this delivery claimed (due, in (`dueAt`, `key`) order); each becomes one group. */
  claimed: readonly Schedule[];
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
  return new BufferedTransaction(options, undefined);
}

/**
 * A {@link DeliveryTransaction} for buffered stores: each claimed schedule is one group of operations
 * (its consumption, then what its processor does), committed with `commitGroups` (one atomic call for the
 * whole batch) or, without it, one `commit` per group. A savepoint is a position in the current group and
 * in the overlay's undo log, so rolling back costs no round trip.
 */
export function createBufferedDelivery<Sql = undefined>(
  options: BufferedDeliveryOptions<Sql>,
): DeliveryTransaction<Sql> {
  return new BufferedDelivery(options, options.claimed);
}

/** What plain transactions and deliveries share: operations in groups, an overlay with an undo log. */
abstract class BufferedWork<Sql> {
  readonly #reads: BufferedReads;
  readonly #options: BufferedTransactionOptions<Sql>;
  /** One group per claimed schedule (deliveries), or the single group '' (plain transactions). */
  readonly #groups = new Map<string, StoreOp[]>();
  readonly #claimed: readonly Schedule[];
  #current: StoreOp[] | undefined;
  readonly #overlay = new Map<string, Overlay>();
  /** Dead letters written (a record) or deleted (null) by this transaction. */
  readonly #dead = new Map<string, DeadLetterRecord | null>();
  readonly #deletedPrefixes: string[] = [];
  readonly #appended = new Map<string, Event[]>();
  /** Undoes overlay changes, newest last, back to a savepoint. */
  readonly #undo: (() => void)[] = [];
  #mark: { ops: number; undo: number } | undefined;
  #finished = false;

  constructor(options: BufferedTransactionOptions<Sql>, claimed: readonly Schedule[] | undefined) {
    this.#options = options;
    this.#reads = options.reads;
    this.#claimed = claimed ?? [];
    if (claimed === undefined) {
      this.#current = [];
      this.#groups.set('', this.#current);
    } else {
      for (const s of claimed) {
        this.#groups.set(s.key, [{ op: 'consume', key: s.key, version: s.version }]);
        this.#overlay.set(s.key, { kind: 'deleted' });
      }
    }
  }

  get claimed(): readonly Schedule[] {
    return this.#claimed;
  }

  get sql(): Sql {
    return this.#options.sql as Sql;
  }

  #open(): void {
    if (this.#finished) throw new ClosedError('transaction');
  }

  #push(op: StoreOp): void {
    if (!this.#current)
      throw new DuetimeError('DUETIME_INVALID_ARGUMENT', 'a delivery operation came before any savepoint');
    this.#current.push(op);
  }

  /** The group of a claimed schedule's part (operations the dispatcher adds for it, not its processor). */
  #part(key: string): StoreOp[] {
    const group = this.#groups.get(key);
    if (!group || this.#claimed.length === 0)
      throw new DuetimeError('DUETIME_INVALID_ARGUMENT', `${JSON.stringify(key)} is not claimed here`);
    return group;
  }

  #setDead(key: string, value: DeadLetterRecord | null): void {
    const had = this.#dead.has(key);
    const before = this.#dead.get(key);
    this.#undo.push(() => (had ? this.#dead.set(key, before!) : this.#dead.delete(key)));
    this.#dead.set(key, value);
  }

  #setOverlay(key: string, entry: Overlay): void {
    const before = this.#overlay.get(key);
    this.#undo.push(() => (before ? this.#overlay.set(key, before) : this.#overlay.delete(key)));
    this.#overlay.set(key, entry);
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
    this.#push({ op: 'append', aggregateId, expectedSequence, events });
    const before = this.#appended.get(aggregateId);
    this.#undo.push(() =>
      before ? this.#appended.set(aggregateId, before) : this.#appended.delete(aggregateId),
    );
    this.#appended.set(aggregateId, [...(before ?? []), ...events]);
  }

  async putSchedule(key: string, at: Date, message: Message, recurrence?: StoredRecurrence): Promise<void> {
    this.#open();
    this.#push(recurrence ? { op: 'put', key, at, message, recurrence } : { op: 'put', key, at, message });
    // The version is assigned at commit; until then the transaction sees its own schedule as version 0.
    this.#setOverlay(key, {
      kind: 'put',
      schedule: {
        key,
        at,
        message,
        version: 0,
        attempts: 0,
        dueAt: at,
        ...(recurrence ? { recurrence } : {}),
      },
    });
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    this.#open();
    if (this.#dead.has(key)) return structuredClone(this.#dead.get(key) ?? undefined);
    return this.#reads.loadDeadLetter(key);
  }

  async deleteDeadLetter(key: string): Promise<boolean> {
    this.#open();
    const existed = (await this.loadDeadLetter(key)) !== undefined;
    this.#push({ op: 'deleteDead', key });
    this.#setDead(key, null);
    return existed;
  }

  async deleteSchedule(key: string): Promise<boolean> {
    this.#open();
    const local = this.#overlay.get(key);
    const existed = local ? local.kind === 'put' : (await this.#committed(key)) !== undefined;
    this.#push({ op: 'delete', key });
    this.#setOverlay(key, { kind: 'deleted' });
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
    for (const [key, entry] of [...this.#overlay]) {
      if (!key.startsWith(prefix)) continue;
      if (entry.kind === 'put') count++;
      this.#setOverlay(key, { kind: 'deleted' });
    }
    this.#deletedPrefixes.push(prefix);
    this.#undo.push(() => this.#deletedPrefixes.pop());
    this.#push({ op: 'deletePrefix', prefix });
    return count;
  }

  savepoint(key: string): void {
    this.#open();
    const group = this.#groups.get(key);
    if (!group || this.#claimed.length === 0)
      throw new DuetimeError('DUETIME_INVALID_ARGUMENT', `${JSON.stringify(key)} is not claimed here`);
    this.#current = group;
    this.#mark = { ops: group.length, undo: this.#undo.length };
  }

  async releaseSavepoint(): Promise<void> {
    this.#mark = undefined;
  }

  async rollbackToSavepoint(): Promise<void> {
    this.#open();
    const mark = this.#mark;
    if (!mark || !this.#current) return;
    this.#current.length = mark.ops;
    while (this.#undo.length > mark.undo) this.#undo.pop()!();
  }

  async restore(schedule: Schedule, failure?: DeliveryFailure): Promise<void> {
    this.#open();
    const group = this.#groups.get(schedule.key);
    if (!group) return;
    group.length = 0;
    if (failure) group.push({ op: 'fail', key: schedule.key, version: schedule.version, ...failure });
    // Its consumption is gone: reads see it as committed again.
    if (this.#overlay.get(schedule.key)?.kind === 'deleted') this.#overlay.delete(schedule.key);
    if (this.#current === group) this.#mark = undefined;
  }

  async deadLetter(
    schedule: Schedule,
    record: { attempts: number; error: string; deadAt: Date },
  ): Promise<void> {
    this.#open();
    const dead: DeadLetterRecord = {
      key: schedule.key,
      version: schedule.version,
      at: schedule.at,
      message: schedule.message,
      ...record,
    };
    this.#part(schedule.key).push({ op: 'dead', record: dead });
    this.#setDead(schedule.key, dead);
  }

  async rearm(schedule: Schedule, at: Date, recurrence: StoredRecurrence): Promise<void> {
    this.#open();
    const { key, message } = schedule;
    this.#part(key).push({ op: 'rearm', key, at, message, recurrence });
    if (this.#overlay.get(key)?.kind !== 'put')
      this.#setOverlay(key, {
        kind: 'put',
        schedule: { key, at, message, version: 0, attempts: 0, dueAt: at, recurrence },
      });
  }

  /** Ends the transaction; returns the non-empty groups in order, keyed by claimed key ('' when plain). */
  protected finish(): [string, StoreOp[]][] {
    this.#open();
    this.#finished = true;
    return [...this.#groups].filter(([, ops]) => ops.length > 0);
  }

  protected get options(): BufferedTransactionOptions<Sql> {
    return this.#options;
  }

  async rollback(): Promise<void> {
    if (this.#finished) return;
    this.#finished = true;
    await this.#options.rollback?.();
  }
}

class BufferedTransaction<Sql> extends BufferedWork<Sql> implements DriverTransaction<Sql> {
  async commit(): Promise<void> {
    const groups = this.finish();
    if (groups.length > 0) await this.options.commit(groups[0]![1]);
  }
}

class BufferedDelivery<Sql> extends BufferedWork<Sql> implements DeliveryTransaction<Sql> {
  async commit(): Promise<ReadonlyMap<string, Error>> {
    const entries = this.finish();
    const rejected = new Map<string, Error>();
    if (entries.length === 0) {
      // Nothing to commit (every claimed schedule was put back unchanged): the delivery still ends, so
      // the driver releases its claims as on a rollback.
      await this.options.rollback?.();
      return rejected;
    }
    const { commit, commitGroups } = this.options;
    if (commitGroups) {
      const results = await commitGroups(entries.map(([, ops]) => ops));
      entries.forEach(([key], i) => {
        const conflict = results[i];
        if (conflict) rejected.set(key, conflict);
      });
      return rejected;
    }
    let applied = 0;
    for (const [key, ops] of entries) {
      try {
        await commit(ops);
        applied++;
      } catch (error) {
        // Groups are independent: one that cannot apply leaves the others alone. When the backend itself
        // failed before anything applied, the whole delivery failed.
        if (!(error instanceof ConflictError) && applied === 0 && rejected.size === 0) throw error;
        rejected.set(key, error instanceof Error ? error : new Error(String(error)));
      }
    }
    return rejected;
  }
}
