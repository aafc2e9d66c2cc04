import type { Claimed, ListQuery, StoreAdapter, Unit, Write } from '../backend/contract.js';
import { withState } from './recurrence.js';
import type { DeadLetterRecord, Event, Schedule } from './types.js';

/** A position in a unit's work to undo back to (a processor's part that failed). */
export interface Mark {
  readonly writes: number;
  readonly undo: number;
  /** Interactive: hand-overs so far (writes handed over since the mark are undone by the adapter's savepoint). */
  readonly flushes: number;
}

const PAGE = 1000;

/**
 * What one unit of work has written and what its reads must see, for the adapter's style: interactive
 * adapters get writes as they go and answer reads inside the unit; buffered adapters get them all at the
 * commit, so reads are answered from committed state overlaid with the unit's own writes.
 *
 * In a delivery, a claimed schedule reads as consumed (its delivery is what the unit is for) until the
 * unit schedules its key again.
 */
export abstract class Work<Sql, U extends Unit<Sql>> {
  readonly adapter: StoreAdapter<Sql, U>;
  readonly unit: U;
  /** Undoes bookkeeping, newest last, back to a mark. */
  protected readonly undoLog: (() => void)[] = [];
  /** Dead letters this unit deleted (dead letters are read outside the unit). */
  readonly #deadDeleted = new Set<string>();

  constructor(adapter: StoreAdapter<Sql, U>, unit: U) {
    this.adapter = adapter;
    this.unit = unit;
  }

  get sql(): Sql {
    return this.unit.sql as Sql;
  }

  /** The writes the commit must still apply (interactive: those not handed over yet). */
  abstract get writes(): Write[];
  /** Starts a new list of writes (a delivery part's, buffered); returns it. */
  abstract openList(): Write[];
  /** Hands pending writes to an interactive adapter (a no-op for buffered ones). */
  abstract flush(): Promise<void>;

  abstract loadSchedule(key: string): Promise<Schedule | undefined>;
  abstract loadEvents(aggregateId: string): Promise<Event[]>;
  abstract put(write: Extract<Write, { op: 'put' }>): void;
  abstract append(write: Extract<Write, { op: 'append' }>): void;
  /** Deletes the schedule under `key`; returns whether one was active (as this unit sees it). */
  abstract delete(key: string): Promise<boolean>;
  /** Deletes the active schedules under `prefix`; returns how many (as this unit sees them). */
  abstract deletePrefix(prefix: string): Promise<number>;
  protected abstract sendDeleteDead(key: string): Promise<boolean | undefined>;

  /** How many times writes were handed to the adapter (interactive). */
  protected flushes = 0;

  mark(): Mark {
    return { writes: this.writes.length, undo: this.undoLog.length, flushes: this.flushes };
  }

  /** Drops every write and read-visible change made since `mark`. */
  undo(mark: Mark): void {
    // After a hand-over the pending list started again: all of it came after the mark.
    this.writes.length = this.flushes === mark.flushes ? Math.min(this.writes.length, mark.writes) : 0;
    while (this.undoLog.length > mark.undo) this.undoLog.pop()!();
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    if (this.#deadDeleted.has(key)) return undefined;
    const [found] = await this.adapter.listDeadLetters({ prefix: key, limit: 1 });
    return found?.key === key ? found : undefined;
  }

  /** Deletes the dead letter under `key`; returns whether there was one. */
  async deleteDead(key: string): Promise<boolean> {
    const known = await this.sendDeleteDead(key);
    const existed = known ?? (await this.loadDeadLetter(key)) !== undefined;
    if (!this.#deadDeleted.has(key)) {
      this.#deadDeleted.add(key);
      this.undoLog.push(() => this.#deadDeleted.delete(key));
    }
    return existed;
  }
}

/** Opens the work of a unit, after the adapter's style. */
export function workOf<Sql, U extends Unit<Sql>>(adapter: StoreAdapter<Sql, U>, unit: U): Work<Sql, U> {
  return adapter.write ? new InteractiveWork(adapter, unit) : new BufferedWork(adapter, unit);
}

/**
 * Interactive: writes that cannot fail alone (puts, appends) wait and go with the next read, delete or the
 * end of a part; deletes go at once (their counts come from the database). Reads run inside the unit.
 */
class InteractiveWork<Sql, U extends Unit<Sql>> extends Work<Sql, U> {
  readonly #pending: Write[] = [];
  /** Claimed keys whose claimed version is still in the database, unseen by this unit's reads. */
  readonly #hidden = new Set<string>();

  constructor(adapter: StoreAdapter<Sql, U>, unit: U) {
    super(adapter, unit);
    for (const s of unit.claimed ?? []) this.#hidden.add(s.key);
  }

  get writes(): Write[] {
    return this.#pending;
  }

  openList(): Write[] {
    return [];
  }

  #reveal(key: string): void {
    if (!this.#hidden.delete(key)) return;
    this.undoLog.push(() => this.#hidden.add(key));
  }

  async flush(): Promise<void> {
    if (this.#pending.length === 0) return;
    const writes = this.#pending.splice(0);
    this.flushes++;
    try {
      await this.adapter.write!(this.unit, writes);
    } catch (error) {
      // Not applied: the part (or the transaction) fails and is undone as a whole.
      this.#pending.unshift(...writes);
      throw error;
    }
  }

  async #send(write: Write): Promise<number> {
    await this.flush();
    const counts = await this.adapter.write!(this.unit, [write]);
    return counts[0] ?? 0;
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    await this.flush();
    if (this.#hidden.has(key)) return undefined;
    return this.adapter.loadSchedule(key, this.unit);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    await this.flush();
    return this.adapter.loadEvents(aggregateId, this.unit);
  }

  put(write: Extract<Write, { op: 'put' }>): void {
    this.#pending.push(write);
    this.#reveal(write.key);
  }

  append(write: Extract<Write, { op: 'append' }>): void {
    this.#pending.push(write);
  }

  async delete(key: string): Promise<boolean> {
    // A claimed version reads as consumed already: there is nothing active to cancel.
    if (this.#hidden.has(key)) return false;
    return (await this.#send({ op: 'delete', key })) > 0;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const count = await this.#send({ op: 'deletePrefix', prefix });
    let hidden = 0;
    for (const key of [...this.#hidden])
      if (key.startsWith(prefix)) {
        hidden++;
        this.#reveal(key); // deleted for real now: nothing left to hide
      }
    return count - hidden;
  }

  protected async sendDeleteDead(key: string): Promise<boolean> {
    return (await this.#send({ op: 'deleteDead', key })) > 0;
  }
}

type Overlay = { kind: 'put'; schedule: Schedule } | { kind: 'deleted' };

/**
 * Buffered: every write waits for the commit; reads see committed state overlaid with this unit's writes.
 * In a delivery each part has a list of its own (its settlement's writes).
 */
class BufferedWork<Sql, U extends Unit<Sql>> extends Work<Sql, U> {
  #current: Write[] = [];
  readonly #overlay = new Map<string, Overlay>();
  readonly #deletedPrefixes: string[] = [];
  readonly #appended = new Map<string, Event[]>();

  constructor(adapter: StoreAdapter<Sql, U>, unit: U) {
    super(adapter, unit);
    for (const s of unit.claimed ?? []) this.#overlay.set(s.key, { kind: 'deleted' });
  }

  get writes(): Write[] {
    return this.#current;
  }

  openList(): Write[] {
    this.#current = [];
    return this.#current;
  }

  async flush(): Promise<void> {}

  #setOverlay(key: string, entry: Overlay): void {
    const before = this.#overlay.get(key);
    this.undoLog.push(() => (before ? this.#overlay.set(key, before) : this.#overlay.delete(key)));
    this.#overlay.set(key, entry);
  }

  #underDeletedPrefix(key: string): boolean {
    return this.#deletedPrefixes.some((p) => key.startsWith(p));
  }

  async #committed(key: string): Promise<Schedule | undefined> {
    if (this.#underDeletedPrefix(key)) return undefined;
    return this.adapter.loadSchedule(key, this.unit);
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const local = this.#overlay.get(key);
    if (local) return local.kind === 'put' ? structuredClone(local.schedule) : undefined;
    return this.#committed(key);
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    const committed = await this.adapter.loadEvents(aggregateId, this.unit);
    return [...committed, ...(this.#appended.get(aggregateId) ?? [])];
  }

  put(write: Extract<Write, { op: 'put' }>): void {
    this.#current.push(write);
    // The version is assigned at commit; until then the unit sees its own schedule as version 0.
    this.#setOverlay(write.key, {
      kind: 'put',
      schedule: withState<Schedule>(
        {
          key: write.key,
          at: write.at,
          message: write.message,
          version: 0,
          attempts: 0,
          dueAt: write.dueAt ?? write.at,
        },
        write.recurrence,
      ),
    });
  }

  append(write: Extract<Write, { op: 'append' }>): void {
    this.#current.push(write);
    const before = this.#appended.get(write.aggregateId);
    this.undoLog.push(() =>
      before ? this.#appended.set(write.aggregateId, before) : this.#appended.delete(write.aggregateId),
    );
    this.#appended.set(write.aggregateId, [...(before ?? []), ...write.events]);
  }

  async delete(key: string): Promise<boolean> {
    const local = this.#overlay.get(key);
    const existed = local ? local.kind === 'put' : (await this.#committed(key)) !== undefined;
    this.#current.push({ op: 'delete', key });
    this.#setOverlay(key, { kind: 'deleted' });
    return existed;
  }

  async deletePrefix(prefix: string): Promise<number> {
    let count = 0;
    if (!this.#underDeletedPrefix(prefix)) {
      let after: ListQuery['after'];
      for (;;) {
        const page = await this.adapter.listSchedules(
          { order: 'key', prefix, select: 'heads', limit: PAGE, ...(after ? { after } : {}) },
          this.unit,
        );
        for (const s of page) if (!this.#overlay.has(s.key) && !this.#underDeletedPrefix(s.key)) count++;
        const last = page.at(-1);
        if (page.length < PAGE || !last) break;
        after = { at: 0, key: last.key };
      }
    }
    for (const [key, entry] of [...this.#overlay]) {
      if (!key.startsWith(prefix)) continue;
      if (entry.kind === 'put') count++;
      this.#setOverlay(key, { kind: 'deleted' });
    }
    this.#deletedPrefixes.push(prefix);
    this.undoLog.push(() => this.#deletedPrefixes.pop());
    this.#current.push({ op: 'deletePrefix', prefix });
    return count;
  }

  protected async sendDeleteDead(key: string): Promise<undefined> {
    this.#current.push({ op: 'deleteDead', key });
    return undefined;
  }
}

/** The claimed schedules of a unit, typed. */
export function claimedOf(unit: Unit<unknown>): readonly Claimed[] {
  return unit.claimed ?? [];
}
