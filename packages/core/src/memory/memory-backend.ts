import type {
  Changes,
  Claimed,
  ClaimRequest,
  CursorBackend,
  DeadLetterListQuery,
  LeaseBackend,
  LeaseGrant,
  LeaseHolder,
  ListQuery,
  Settlement,
  StoreAdapter,
  Unit,
  WatchEvent,
  Write,
} from '../backend/contract.js';
import { decodeDeadLetter, decodeEvent, decodeSchedule } from '../backend/decode.js';
import { assembleBackend, type BackendDefinition, prepareBackend } from '../backend/define.js';
import type { Backend } from '../backend.js';
import { type Clock, systemClock } from '../clock.js';
import { ConflictError, InvalidArgumentError } from '../errors.js';
import type { Logger } from '../logger.js';
import { isOneShot, type StoredState } from '../store/recurrence.js';
import type { DeadLetterRecord, Event, Schedule } from '../store/types.js';

/** A schedule as kept: text where a durable backend keeps text. */
interface StoredSchedule {
  at: number;
  dueAt: number;
  message: string;
  version: number;
  attempts: number;
  lastError?: string;
  recurrence?: string;
  /** Whether the stored state is a recurrence (not a one-shot schedule's operator state). */
  recurring?: true;
}

/** A delivery's claim on one version: held by an open unit, or orphaned by {@link MemoryDatabase.crash}. */
interface Claim {
  version: number;
  unit: number;
  orphaned: boolean;
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
  /** Schedule versions claimed by open deliveries, by key. */
  readonly claims = new Map<string, Claim>();
  readonly watchers = new Set<(event: WatchEvent) => void>();
  readonly clock: Clock;
  #units = 0;

  constructor(options: { clock?: Clock } = {}) {
    this.clock = options.clock ?? systemClock;
  }

  /** A fresh unit number. */
  nextUnit(): number {
    return ++this.#units;
  }

  /**
   * Simulates the death of every process using this database while deliveries are open: their claims are
   * orphaned (the next claim of those versions reports them `interrupted`) and the open deliveries can no
   * longer commit them. For tests of crash handling without real processes.
   */
  crash(): void {
    for (const claim of this.claims.values()) claim.orphaned = true;
  }
}

export interface MemoryBackendOptions {
  /** Share data with other instances (default: a new, empty database). */
  database?: MemoryDatabase;
  /** The clock that stamps events and judges leases and cursors (default: the database's clock). */
  clock?: Clock;
  logger?: Logger;
}

interface MemoryUnit extends Unit<undefined> {
  readonly id: number;
  readonly claimed?: readonly Claimed[];
}

type Resolved = { database: MemoryDatabase | undefined };

const definition: BackendDefinition<undefined, Resolved, undefined, MemoryUnit, object> = {
  name: 'memory',
  factory: 'createMemoryBackend',
  options: (read) => {
    const database = read.value<MemoryDatabase>('database');
    if (database !== undefined && !(database instanceof MemoryDatabase))
      throw new InvalidArgumentError('options.database', database, 'must be a MemoryDatabase');
    return { database };
  },
  open: async () => {
    throw new Error('opened synchronously by createMemoryBackend');
  },
};

/**
 * The in-memory reference backend: the whole contract in a few hundred lines (a buffered adapter: core
 * keeps each unit's writes and hands them to one `commit`), with the same semantics as the durable
 * backends except durability itself and sharing across processes. Use it in unit tests of code that uses
 * duetime, and read it when writing an adapter.
 */
export function createMemoryBackend(options: MemoryBackendOptions = {}): Backend<undefined> {
  const given = options?.database instanceof MemoryDatabase && options.clock === undefined;
  const opening = prepareBackend(
    definition,
    given ? { ...options, clock: options.database!.clock } : options,
  );
  const clock = opening.context.clock;
  const db = opening.context.options.database ?? new MemoryDatabase({ clock });
  return assembleBackend(definition, opening, {
    store: new MemoryStore(db),
    leases: new MemoryLeases(db, clock),
    cursors: new MemoryCursors(db, clock),
    capabilities: { multiProcess: false, durable: false, sql: false, exclusiveClaims: true },
    describe: 'memory backend',
  });
}

/**
 * The memory backend's store adapter on `database`: the reference {@link StoreAdapter} (buffered style).
 * For tests that wrap an adapter, and for reading when writing one.
 */
export function memoryAdapter(database: MemoryDatabase): StoreAdapter<undefined, Unit<undefined>> {
  return new MemoryStore(database) as StoreAdapter<undefined, Unit<undefined>>;
}

function toSchedule(key: string, s: StoredSchedule): Schedule {
  return decodeSchedule({ key, ...s }, 'memory');
}

function compare(a: [string, number], b: [string, number]): number {
  return a[1] - b[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
}

class MemoryStore implements StoreAdapter<undefined, MemoryUnit> {
  readonly #db: MemoryDatabase;

  constructor(db: MemoryDatabase) {
    this.#db = db;
  }

  async begin(claim?: ClaimRequest): Promise<MemoryUnit> {
    const id = this.#db.nextUnit();
    if (!claim) return { id };
    const { claims, schedules } = this.#db;
    const due = [...schedules]
      .filter(([key, s]) => {
        const held = claims.get(key);
        return s.dueAt <= claim.now.getTime() && (!held || held.orphaned || held.version !== s.version);
      })
      .map(([key, s]) => [key, s.dueAt] as [string, number])
      .sort(compare)
      .slice(0, claim.limit);
    const claimed: Claimed[] = due.map(([key]) => {
      const s = schedules.get(key)!;
      const before = claims.get(key);
      claims.set(key, { version: s.version, unit: id, orphaned: false });
      const schedule: Claimed = toSchedule(key, s);
      if (before?.orphaned && before.version === s.version) schedule.interrupted = true;
      return schedule;
    });
    return { id, claimed };
  }

  async commit(unit: MemoryUnit, changes: Changes): Promise<ReadonlyMap<string, Error>> {
    const rejected = new Map<string, Error>();
    let earliest: number | undefined;
    const note = (at: number | undefined) => {
      if (at !== undefined && (earliest === undefined || at < earliest)) earliest = at;
    };
    try {
      if (changes.writes.length > 0) note(this.#group(() => this.#writes(changes.writes)));
      for (const settlement of changes.settlements) {
        try {
          note(this.#group(() => this.#settle(unit, settlement)));
        } catch (error) {
          if (!(error instanceof ConflictError)) throw error;
          rejected.set(settlement.schedule.key, error);
        }
      }
    } finally {
      this.#release(unit);
    }
    if (earliest !== undefined) {
      const event: WatchEvent = { type: 'change', earliest: new Date(earliest) };
      for (const watcher of [...this.#db.watchers]) queueMicrotask(() => watcher(event));
    }
    return rejected;
  }

  async rollback(unit: MemoryUnit): Promise<void> {
    this.#release(unit);
  }

  #release(unit: MemoryUnit): void {
    for (const s of unit.claimed ?? []) {
      const claim = this.#db.claims.get(s.key);
      if (claim?.unit === unit.id && !claim.orphaned) this.#db.claims.delete(s.key);
    }
  }

  /**
   * Runs `apply` as one group: all of it or, when it throws, none (the database is restored). Returns
   * the earliest deadline the group scheduled.
   */
  #group(apply: () => number | undefined): number | undefined {
    const db = this.#db;
    const saved = {
      schedules: new Map(db.schedules),
      events: new Map(db.events),
      deadLetters: new Map(db.deadLetters),
      version: db.version,
    };
    try {
      return apply();
    } catch (error) {
      for (const name of ['schedules', 'events', 'deadLetters'] as const) {
        const target = db[name] as Map<string, unknown>;
        target.clear();
        for (const [k, v] of saved[name]) target.set(k, v);
      }
      db.version = saved.version;
      throw error;
    }
  }

  #settle(unit: MemoryUnit, s: Settlement): number | undefined {
    const { key, version } = s.schedule;
    const claim = this.#db.claims.get(key);
    const current = this.#db.schedules.get(key);
    const ours = claim?.unit === unit.id && !claim.orphaned;
    if (s.outcome === 'release') return undefined;
    if (s.outcome === 'retry') {
      if (!ours || current?.version !== version || !s.failure) return undefined;
      const { attempts, dueAt, error, at } = s.failure;
      this.#db.schedules.set(key, {
        ...current,
        attempts,
        dueAt: dueAt.getTime(),
        lastError: error,
        ...(at ? { at: at.getTime() } : {}),
      });
      return dueAt.getTime();
    }
    if (!ours || current?.version !== version) throw new ConflictError('schedule', key);
    this.#db.schedules.delete(key);
    if (s.dead)
      this.#db.deadLetters.set(
        key,
        JSON.stringify({
          key,
          version,
          at: s.schedule.at.getTime(),
          message: s.schedule.message,
          attempts: s.dead.attempts,
          error: s.dead.error,
          deadAt: s.dead.deadAt.getTime(),
        }),
      );
    let earliest = this.#writes(s.writes);
    if (s.next && !this.#db.schedules.has(key)) {
      const dueAt = s.next.dueAt ?? s.next.at;
      earliest = Math.min(earliest ?? Number.POSITIVE_INFINITY, dueAt.getTime());
      this.#put(key, s.next.at, dueAt, JSON.stringify(s.schedule.message), s.next.recurrence);
    }
    return earliest;
  }

  #put(key: string, at: Date, dueAt: Date, message: string, state: StoredState | undefined): void {
    this.#db.version++;
    this.#db.schedules.set(key, {
      at: at.getTime(),
      dueAt: dueAt.getTime(),
      message,
      version: this.#db.version,
      attempts: 0,
      ...(state !== undefined ? { recurrence: JSON.stringify(state) } : {}),
      ...(state !== undefined && !isOneShot(state) ? { recurring: true as const } : {}),
    });
  }

  /** Applies writes in order; returns the earliest deadline they scheduled. */
  #writes(writes: readonly Write[]): number | undefined {
    const db = this.#db;
    let earliest: number | undefined;
    for (const w of writes) {
      switch (w.op) {
        case 'put': {
          if (w.ifVersion !== undefined && db.schedules.get(w.key)?.version !== w.ifVersion)
            throw new ConflictError('version', w.key);
          const dueAt = w.dueAt ?? w.at;
          this.#put(w.key, w.at, dueAt, JSON.stringify(w.message), w.recurrence);
          if (earliest === undefined || dueAt.getTime() < earliest) earliest = dueAt.getTime();
          break;
        }
        case 'delete':
          db.schedules.delete(w.key);
          break;
        case 'deletePrefix':
          for (const key of [...db.schedules.keys()]) if (key.startsWith(w.prefix)) db.schedules.delete(key);
          break;
        case 'append': {
          const stream = db.events.get(w.aggregateId) ?? [];
          if (stream.length !== w.expectedSequence) throw new ConflictError('aggregate', w.aggregateId);
          db.events.set(w.aggregateId, [...stream, ...w.events.map((e) => JSON.stringify(e))]);
          break;
        }
        case 'deleteDead':
          db.deadLetters.delete(w.key);
          break;
      }
    }
    return earliest;
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    const s = this.#db.schedules.get(key);
    return s ? toSchedule(key, s) : undefined;
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    return (this.#db.events.get(aggregateId) ?? []).map((text) =>
      decodeEvent(aggregateId, JSON.parse(text) as Event, 'memory'),
    );
  }

  async listSchedules(query: ListQuery): Promise<Schedule[]> {
    const { order, through, prefix, after, recurring, limit } = query;
    const instant = (s: StoredSchedule) => (order === 'due' ? s.dueAt : order === 'at' ? s.at : 0);
    return [...this.#db.schedules]
      .filter(
        ([key, s]) =>
          (through === undefined || instant(s) <= through.getTime()) &&
          (prefix === undefined || key.startsWith(prefix)) &&
          (recurring === undefined || (s.recurring === true) === recurring) &&
          (after === undefined ||
            instant(s) > (order === 'key' ? 0 : after.at) ||
            (instant(s) === (order === 'key' ? 0 : after.at) && key > after.key)),
      )
      .map(([key, s]) => [key, instant(s)] as [string, number])
      .sort(compare)
      .slice(0, limit)
      .map(([key]) => toSchedule(key, this.#db.schedules.get(key)!));
  }

  async listDeadLetters(query: DeadLetterListQuery): Promise<DeadLetterRecord[]> {
    const { prefix, after, limit } = query;
    return [...this.#db.deadLetters]
      .filter(
        ([key]) => (prefix === undefined || key.startsWith(prefix)) && (after === undefined || key > after),
      )
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .slice(0, limit)
      .map(([, text]) => decodeDeadLetter(JSON.parse(text), 'memory'));
  }

  watch(listener: (event: WatchEvent) => void): () => void {
    this.#db.watchers.add(listener);
    queueMicrotask(() => listener({ type: 'live' }));
    return () => this.#db.watchers.delete(listener);
  }
}

class MemoryLeases implements LeaseBackend {
  constructor(
    readonly db: MemoryDatabase,
    readonly clock: Clock,
  ) {}

  #live(key: string) {
    const lease = this.db.leases.get(key);
    return lease && lease.expiresAt > this.clock.now() ? lease : undefined;
  }

  async acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
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
    const live = this.#live(key);
    if (!live || live.owner !== owner || live.token !== token) return undefined;
    live.expiresAt = this.clock.now() + ttlMs;
    return { token };
  }

  async release(key: string, owner: string, token: number): Promise<boolean> {
    const live = this.#live(key);
    if (!live || live.owner !== owner || live.token !== token) return false;
    this.db.leases.delete(key);
    return true;
  }

  async holder(key: string): Promise<LeaseHolder | undefined> {
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
  ) {}

  async read(key: string): Promise<Date | undefined> {
    const c = this.db.cursors.get(key);
    return c && c.expiresAt > this.clock.now() ? new Date(c.at) : undefined;
  }

  async advance(key: string, at: Date, ttlMs: number): Promise<Date> {
    const now = this.clock.now();
    const c = this.db.cursors.get(key);
    const current = c && c.expiresAt > now ? c.at : undefined;
    const next = current === undefined ? at.getTime() : Math.max(current, at.getTime());
    this.db.cursors.set(key, { at: next, expiresAt: now + ttlMs });
    return new Date(next);
  }
}
