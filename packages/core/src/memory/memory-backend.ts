import type { Backend } from '../backend.js';
import { type Clock, systemClock } from '../clock.js';
import { ClosedError, ConflictError } from '../errors.js';
import { guardCursors, guardLeases } from '../factory/lifecycle.js';
import type { CursorBackend, LeaseBackend, LeaseGrant, LeaseHolder } from '../lease/types.js';
import type { Logger } from '../logger.js';
import { type BufferedReads, createBufferedDelivery, createBufferedTransaction } from '../store/buffered.js';
import type {
  DeliveryTransaction,
  DriverDeadLetterQuery,
  DriverScheduleQuery,
  DriverTransaction,
  StoreDriver,
  StoreOp,
} from '../store/driver.js';
import { readRecurrence } from '../store/recurrence.js';
import { createStore, type Store } from '../store/store.js';
import type { DeadLetterRecord, Event, Message, Schedule } from '../store/types.js';

interface StoredSchedule {
  at: number;
  message: string;
  version: number;
  attempts: number;
  dueAt: number;
  lastError?: string;
  /** The stored recurrence as JSON text, as a durable backend would keep it. */
  recurrence?: string;
}

/**
 * The data of one in-memory backend. Several {@link createMemoryBackend} instances given the same
 * database see the same data, as processes sharing a real database would (inside one process).
 */
export class MemoryDatabase {
  readonly events = new Map<string, string[]>();
  readonly schedules = new Map<string, StoredSchedule>();
  /** Dead letters by key, as JSON text. */
  readonly deadLetters = new Map<string, string>();
  /** The store-wide version counter (only grows). */
  version = 0;
  readonly leases = new Map<string, { owner: string; token: number; expiresAt: number }>();
  readonly tokens = new Map<string, number>();
  readonly cursors = new Map<string, { at: number; expiresAt: number }>();
  /**
   * Schedule versions held by open deliveries (`key` → version), so that two dispatchers sharing this
   * database never run one schedule at once (exclusive claims). Released when the delivery ends.
   */
  readonly claims = new Map<string, number>();
  readonly watchers = new Set<(change: { earliest?: Date }) => void>();
  readonly clock: Clock;

  constructor(options: { clock?: Clock } = {}) {
    this.clock = options.clock ?? systemClock;
  }
}

export interface MemoryBackendOptions {
  /** Share data with other instances (default: a new, empty database). */
  database?: MemoryDatabase;
  /** The clock that stamps events and judges leases and cursors (default: the system clock). */
  clock?: Clock;
  logger?: Logger;
}

/**
 * The in-memory reference backend: the whole contract in a few hundred lines, with the same semantics as
 * the durable backends except durability itself and sharing across processes. Use it in unit tests of
 * code that uses duetime, and read it when writing an adapter.
 */
export function createMemoryBackend(options: MemoryBackendOptions = {}): Backend<undefined> {
  const db = options.database ?? new MemoryDatabase(options.clock ? { clock: options.clock } : {});
  const clock = options.clock ?? db.clock;
  let closed = false;
  const check = () => {
    if (closed) throw new ClosedError('memory backend');
  };
  const driver = new MemoryStoreDriver(db, check, () => {
    closed = true;
  });
  const store: Store<undefined> = createStore(driver, {
    clock,
    ...(options.logger ? { logger: options.logger } : {}),
  });
  return {
    name: 'memory',
    store,
    // As every backend does: core checks the arguments and the closed state before the adapter's code runs.
    leases: guardLeases(new MemoryLeases(db, clock, check), check),
    cursors: guardCursors(new MemoryCursors(db, clock, check), check),
    capabilities: { multiProcess: false, durable: false, sql: false, exclusiveClaims: true },
    async close() {
      await store.close();
    },
  };
}

function toSchedule(key: string, s: StoredSchedule): Schedule {
  const schedule: Schedule = {
    key,
    at: new Date(s.at),
    message: JSON.parse(s.message) as Message,
    version: s.version,
    attempts: s.attempts,
    dueAt: new Date(s.dueAt),
  };
  if (s.lastError !== undefined) schedule.lastError = s.lastError;
  if (s.recurrence !== undefined) schedule.recurrence = readRecurrence(JSON.parse(s.recurrence), key);
  return schedule;
}

function toDeadLetter(text: string): DeadLetterRecord {
  const d = JSON.parse(text) as Omit<DeadLetterRecord, 'at' | 'deadAt'> & { at: number; deadAt: number };
  return { ...d, at: new Date(d.at), deadAt: new Date(d.deadAt) };
}

function compareBy(field: 'at' | 'dueAt') {
  return (a: [string, StoredSchedule], b: [string, StoredSchedule]) =>
    a[1][field] - b[1][field] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
}

class MemoryStoreDriver implements StoreDriver<undefined> {
  readonly #db: MemoryDatabase;
  readonly #check: () => void;
  readonly #onClose: () => void;
  readonly #unwatch = new Set<() => void>();

  constructor(db: MemoryDatabase, check: () => void, onClose: () => void) {
    this.#db = db;
    this.#check = check;
    this.#onClose = onClose;
  }

  readonly #reads: BufferedReads = {
    loadEvents: (id) => this.loadEvents(id),
    loadSchedule: (key) => this.loadSchedule(key),
    listSchedules: (q) => this.listSchedules(q),
    loadDeadLetter: (key) => this.loadDeadLetter(key),
  };

  async begin(): Promise<DriverTransaction<undefined>> {
    this.#check();
    return createBufferedTransaction({ reads: this.#reads, commit: async (ops) => void this.#apply([ops]) });
  }

  /**
   * A delivery claims the due schedules no other open delivery holds, then commits one group per schedule
   * (its consumption and its processor's operations) in one atomic step, each group all or nothing.
   */
  async deliver(now: Date, limit: number): Promise<DeliveryTransaction<undefined>> {
    this.#check();
    const { claims } = this.#db;
    const claimed: Schedule[] = [];
    const rows = [...this.#db.schedules]
      .filter(([key, s]) => s.dueAt <= now.getTime() && claims.get(key) !== s.version)
      .sort(compareBy('dueAt'));
    for (const [key, s] of rows.slice(0, limit)) {
      claims.set(key, s.version);
      claimed.push(toSchedule(key, s));
    }
    const release = async () => {
      for (const s of claimed) if (claims.get(s.key) === s.version) claims.delete(s.key);
    };
    return createBufferedDelivery({
      claimed,
      reads: this.#reads,
      commit: async (ops) => void this.#apply([ops]),
      commitGroups: async (groups) => {
        try {
          return this.#apply(groups, true);
        } finally {
          await release();
        }
      },
      rollback: release,
    });
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    this.#check();
    return (this.#db.events.get(aggregateId) ?? []).map((e) => JSON.parse(e) as Event);
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    this.#check();
    const s = this.#db.schedules.get(key);
    return s ? toSchedule(key, s) : undefined;
  }

  async listSchedules(query: DriverScheduleQuery): Promise<Schedule[]> {
    this.#check();
    const { through, prefix, after, limit } = query;
    const rows = [...this.#db.schedules].filter(
      ([key, s]) =>
        (through === undefined || s.at <= through.getTime()) &&
        (prefix === undefined || key.startsWith(prefix)) &&
        (after === undefined || s.at > after.at || (s.at === after.at && key > after.key)),
    );
    return rows
      .sort(compareBy('at'))
      .slice(0, limit)
      .map(([key, s]) => toSchedule(key, s));
  }

  async dueSchedules(now: Date, limit: number): Promise<Schedule[]> {
    this.#check();
    const rows = [...this.#db.schedules].filter(([, s]) => s.dueAt <= now.getTime());
    return rows
      .sort(compareBy('dueAt'))
      .slice(0, limit)
      .map(([key, s]) => toSchedule(key, s));
  }

  async loadDeadLetter(key: string): Promise<DeadLetterRecord | undefined> {
    this.#check();
    const text = this.#db.deadLetters.get(key);
    return text === undefined ? undefined : toDeadLetter(text);
  }

  async listDeadLetters(query: DriverDeadLetterQuery): Promise<DeadLetterRecord[]> {
    this.#check();
    const { prefix, after, limit } = query;
    return [...this.#db.deadLetters]
      .filter(
        ([key]) => (prefix === undefined || key.startsWith(prefix)) && (after === undefined || key > after),
      )
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .slice(0, limit)
      .map(([, text]) => toDeadLetter(text));
  }

  async nextDueAt(): Promise<Date | undefined> {
    this.#check();
    let min: number | undefined;
    for (const s of this.#db.schedules.values()) if (min === undefined || s.dueAt < min) min = s.dueAt;
    return min === undefined ? undefined : new Date(min);
  }

  watch(onChange: (change: { earliest?: Date }) => void): () => void {
    const listener = (change: { earliest?: Date }) => onChange(change);
    this.#db.watchers.add(listener);
    const unwatch = () => {
      this.#db.watchers.delete(listener);
      this.#unwatch.delete(unwatch);
    };
    this.#unwatch.add(unwatch);
    return unwatch;
  }

  async close(): Promise<void> {
    for (const unwatch of [...this.#unwatch]) unwatch();
    this.#onClose();
  }

  /**
   * Applies groups of operations in order, each all or nothing (a change is undone when a later
   * precondition of its group fails). With `independent`, a group that fails is left out and reported;
   * otherwise its ConflictError is thrown (a plain transaction is one group).
   */
  #apply(groups: StoreOp[][], independent = false): (ConflictError | undefined)[] {
    this.#check();
    const results: (ConflictError | undefined)[] = [];
    let earliest: number | undefined;
    let put = false;
    for (const ops of groups) {
      try {
        const group = this.#applyGroup(ops);
        put ||= group.put;
        if (group.earliest !== undefined && (earliest === undefined || group.earliest < earliest))
          earliest = group.earliest;
        results.push(undefined);
      } catch (error) {
        if (!independent || !(error instanceof ConflictError)) throw error;
        results.push(error);
      }
    }
    if (put) {
      const change = earliest === undefined ? {} : { earliest: new Date(earliest) };
      for (const watcher of [...this.#db.watchers]) queueMicrotask(() => watcher(change));
    }
    return results;
  }

  #applyGroup(ops: StoreOp[]): { put: boolean; earliest: number | undefined } {
    const db = this.#db;
    const undo: (() => void)[] = [];
    let earliest: number | undefined;
    let put = false;
    const setSchedule = (key: string, value: StoredSchedule | undefined) => {
      const before = db.schedules.get(key);
      undo.push(() => (before ? db.schedules.set(key, before) : db.schedules.delete(key)));
      if (value) db.schedules.set(key, value);
      else db.schedules.delete(key);
    };
    try {
      for (const op of ops) {
        switch (op.op) {
          case 'append': {
            const stream = db.events.get(op.aggregateId) ?? [];
            if (stream.length !== op.expectedSequence) throw new ConflictError('aggregate', op.aggregateId);
            const before = db.events.get(op.aggregateId);
            undo.push(() =>
              before ? db.events.set(op.aggregateId, before) : db.events.delete(op.aggregateId),
            );
            db.events.set(op.aggregateId, [...stream, ...op.events.map((e) => JSON.stringify(e))]);
            break;
          }
          case 'put':
          case 'rearm': {
            // A recurrence's next occurrence never replaces a schedule written since it was claimed.
            if (op.op === 'rearm' && db.schedules.has(op.key)) break;
            const previous = db.version;
            undo.push(() => {
              db.version = previous;
            });
            db.version = previous + 1;
            const at = op.at.getTime();
            setSchedule(op.key, {
              at,
              message: JSON.stringify(op.message),
              version: previous + 1,
              attempts: 0,
              dueAt: at,
              ...(op.recurrence ? { recurrence: JSON.stringify(op.recurrence) } : {}),
            });
            put = true;
            if (earliest === undefined || at < earliest) earliest = at;
            break;
          }
          case 'dead':
          case 'deleteDead': {
            const key = op.op === 'dead' ? op.record.key : op.key;
            const before = db.deadLetters.get(key);
            undo.push(() =>
              before === undefined ? db.deadLetters.delete(key) : db.deadLetters.set(key, before),
            );
            if (op.op === 'dead') db.deadLetters.set(key, JSON.stringify(op.record));
            else db.deadLetters.delete(key);
            break;
          }
          case 'delete':
            setSchedule(op.key, undefined);
            break;
          case 'deletePrefix':
            for (const key of [...db.schedules.keys()])
              if (key.startsWith(op.prefix)) setSchedule(key, undefined);
            break;
          case 'consume': {
            const current = db.schedules.get(op.key);
            if (!current || current.version !== op.version) throw new ConflictError('schedule', op.key);
            setSchedule(op.key, undefined);
            break;
          }
          case 'fail': {
            const current = db.schedules.get(op.key);
            if (current && current.version === op.version)
              setSchedule(op.key, {
                ...current,
                attempts: op.attempts,
                dueAt: op.dueAt.getTime(),
                lastError: op.error,
                ...(op.at ? { at: op.at.getTime() } : {}),
              });
            break;
          }
        }
      }
    } catch (error) {
      for (const step of undo.reverse()) step();
      throw error;
    }
    return { put, earliest };
  }
}

class MemoryLeases implements LeaseBackend {
  constructor(
    readonly db: MemoryDatabase,
    readonly clock: Clock,
    readonly check: () => void,
  ) {}

  #live(key: string) {
    const lease = this.db.leases.get(key);
    return lease && lease.expiresAt > this.clock.now() ? lease : undefined;
  }

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    this.check();
    const live = this.#live(key);
    if (live && live.owner !== owner) return undefined;
    const now = this.clock.now();
    if (live) {
      live.expiresAt = now + ttlMs;
      return { token: live.token };
    }
    const token = (this.db.tokens.get(key) ?? 0) + 1;
    this.db.tokens.set(key, token);
    this.db.leases.set(key, { owner, token, expiresAt: now + ttlMs });
    return { token };
  }

  async renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    this.check();
    const live = this.#live(key);
    if (!live || live.owner !== owner || live.token !== token) return undefined;
    live.expiresAt = this.clock.now() + ttlMs;
    return { token };
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    this.check();
    const live = this.#live(key);
    if (!live || live.owner !== owner || live.token !== token) return false;
    this.db.leases.delete(key);
    return true;
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
    this.check();
    const live = this.#live(key);
    return live
      ? { owner: live.owner, token: live.token, remainingMs: live.expiresAt - this.clock.now() }
      : undefined;
  }
}

class MemoryCursors implements CursorBackend {
  constructor(
    readonly db: MemoryDatabase,
    readonly clock: Clock,
    readonly check: () => void,
  ) {}

  async read(key: string): Promise<Date | undefined> {
    this.check();
    const c = this.db.cursors.get(key);
    return c && c.expiresAt > this.clock.now() ? new Date(c.at) : undefined;
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    this.check();
    const now = this.clock.now();
    const c = this.db.cursors.get(key);
    const current = c && c.expiresAt > now ? c.at : undefined;
    const next = current === undefined ? at.getTime() : Math.max(current, at.getTime());
    this.db.cursors.set(key, { at: next, expiresAt: now + ttlMs });
    return new Date(next);
  }
}
