import {
  type Backend,
  type Changes,
  type ClaimRequest,
  createMemoryBackend,
  createStore,
  InvalidArgumentError,
  MemoryDatabase,
  memoryAdapter,
  type StoreAdapter,
  type Unit,
} from '@duetime/core';
import type { SqlProbe } from '../src/index.js';

/**
 * Backends built over the in-memory adapter, to check the suite's weaker promises and its SQL groups in
 * this package's own tests (the real SQL backends run the suite in their packages).
 */

const databases = new Map<string, MemoryDatabase>();

function databaseOf(namespace: string): MemoryDatabase {
  let database = databases.get(namespace);
  if (!database) {
    database = new MemoryDatabase();
    databases.set(namespace, database);
  }
  return database;
}

/** A backend over `adapter`, with the memory backend's leases and cursors on the same database. */
function over(namespace: string, name: string, adapter: StoreAdapter<unknown, Unit<unknown>>, sql: boolean) {
  const base = createMemoryBackend({ database: databaseOf(namespace) });
  const store = createStore(adapter, { name });
  const backend: Backend = {
    name,
    store,
    leases: base.leases,
    cursors: base.cursors,
    capabilities: { ...base.capabilities, sql },
    close: async () => {
      await store.close();
      await base.close();
    },
  };
  return backend;
}

/**
 * The memory adapter answering every list in key order, without a push channel. (Core needs one of the two
 * to deliver promptly, so this store is for the suite's read, push-channel and crash groups only.)
 */
export async function openKeyOrder(namespace: string): Promise<Backend> {
  const inner = memoryAdapter(databaseOf(namespace));
  const adapter: StoreAdapter<unknown, Unit<unknown>> = {
    begin: (claim?: ClaimRequest) => inner.begin(claim),
    commit: (unit, changes) => inner.commit(unit as Unit<undefined>, changes),
    rollback: (unit) => inner.rollback(unit as Unit<undefined>),
    loadSchedule: (key) => inner.loadSchedule(key),
    loadEvents: (id) => inner.loadEvents(id),
    // Key order, `through` still bounding the deadline (what a store without a deadline index can do).
    async listSchedules(query) {
      const { through, limit, ...rest } = query;
      const all = await inner.listSchedules({ ...rest, order: 'key', limit: Number.MAX_SAFE_INTEGER });
      return all.filter((s) => through === undefined || s.at <= through).slice(0, limit);
    },
    listDeadLetters: (query) => inner.listDeadLetters(query),
    order: ['key'],
  };
  return over(namespace, 'memory-key-order', adapter, false);
}

/**
 * A stand-in for an SQL handle: rows written in a unit commit with it; savepoints work; transaction
 * control is refused, as a real SQL backend's handle must refuse it.
 */
export class FakeSql {
  readonly rows: string[] = [];
  readonly #savepoints = new Map<string, number>();

  async query(text: string): Promise<void> {
    const bare = text.replace(/^(?:\s+|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)+/, '');
    if (/^(?:begin|start\s+transaction|commit|end|abort|rollback(?!\s+to\b))\b/i.test(bare))
      throw new InvalidArgumentError('tx.sql', text, 'transaction control is refused: use a savepoint');
    const [, verb, name] =
      /^(savepoint|rollback\s+to\s+savepoint|release\s+savepoint)\s+(\w+)$/i.exec(bare) ?? [];
    if (!verb || !name) throw new Error(`the fake SQL handle does not know ${JSON.stringify(text)}`);
    const lower = verb.toLowerCase();
    if (lower === 'savepoint') this.#savepoints.set(name, this.rows.length);
    else if (lower.startsWith('rollback')) this.rows.length = this.#savepoints.get(name) ?? this.rows.length;
    else this.#savepoints.delete(name);
  }
}

const tables = new Map<string, string[]>();

/** The memory adapter with a {@link FakeSql} handle in each unit and processors' parts undone with it. */
export async function openFakeSql(namespace: string): Promise<Backend> {
  const inner = memoryAdapter(databaseOf(namespace));
  const table = tables.get(namespace) ?? [];
  tables.set(namespace, table);
  type SqlUnit = Unit<FakeSql> & { sql: FakeSql };
  const adapter: StoreAdapter<FakeSql, SqlUnit> = {
    begin: async (claim?: ClaimRequest) => Object.assign(await inner.begin(claim), { sql: new FakeSql() }),
    async commit(unit, changes: Changes) {
      const rejected = await inner.commit(unit as unknown as Unit<undefined>, changes);
      table.push(...unit.sql.rows);
      return rejected;
    },
    rollback: (unit) => inner.rollback(unit as unknown as Unit<undefined>),
    async part(unit, fn) {
      const mark = unit.sql.rows.length;
      try {
        return await fn();
      } catch (error) {
        unit.sql.rows.length = mark;
        throw error;
      }
    },
    loadSchedule: (key) => inner.loadSchedule(key),
    loadEvents: (id) => inner.loadEvents(id),
    listSchedules: (query) => inner.listSchedules(query),
    listDeadLetters: (query) => inner.listDeadLetters(query),
    watch: (listener) => inner.watch!(listener),
  };
  return over(namespace, 'memory-fake-sql', adapter as StoreAdapter<unknown, Unit<unknown>>, true);
}

/** The probe of {@link openFakeSql}'s handle. */
export const fakeSqlProbe: SqlProbe = {
  setup: async () => {},
  write: async (sql, id) => void (sql as FakeSql).rows.push(id),
  rows: async (backend) => [...(tables.get((backend as Backend & { namespace: string }).namespace) ?? [])],
  exec: (sql, text) => (sql as FakeSql).query(text),
};
