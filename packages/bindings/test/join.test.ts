import { createPostgresBackend } from '@duetime/backend-postgres';
import { InvalidArgumentError, type SqlExecutor } from '@duetime/core';
import { drizzle } from 'drizzle-orm/node-postgres';
import { describe, expect, it } from 'vitest';
import { fromDrizzle } from '../src/drizzle.js';
import { fromPg } from '../src/pg.js';
import { useBackend } from './server.js';
import { TARGETS } from './targets/index.js';

// store.join through each library's binding is the binding conformance group's (conformance.test.ts);
// here, what differs between the libraries, and the store's own refusals.

const HOUR = 3_600_000;

/** `executor`, recording the statement name each call is handed in `names`. */
function recording(executor: SqlExecutor, names: (string | undefined)[]): SqlExecutor {
  return {
    ...executor,
    query: (text, params, name) => {
      names.push(name);
      return executor.query(text, params, name);
    },
  };
}
const server = useBackend('bindings_join', async () => {});

describe('store.join through the bindings', () => {
  it('tells the transaction state without a round trip where the library can (else the store asks with a savepoint)', async () => {
    const told: Record<string, boolean | undefined> = {};
    for (const { target } of Object.values(TARGETS)) {
      if (!target.transaction) continue;
      const library = await target.open({ url: server.url, schema: server.schema });
      try {
        let kept: SqlExecutor | undefined;
        await target.transaction(library, async (executor: SqlExecutor) => {
          kept = executor;
          told[target.name] = executor.inTransaction?.();
        });
        // Once the transaction ended, a library that tells says so (the store then refuses the handle).
        if (told[target.name]) expect(kept?.inTransaction?.(), target.name).toBe(false);
      } finally {
        await target.close(library);
      }
    }
    expect(told).toEqual({
      'node-postgres': true,
      'postgres.js': undefined,
      Kysely: undefined,
      Knex: true,
      'Drizzle (node-postgres)': true,
      'Drizzle (postgres.js)': undefined,
      Prisma: undefined,
      TypeORM: true,
      Sequelize: true,
    });
  });

  it('sends through Drizzle itself when its session holds no driver client it knows (commit, rollback, a refused key)', async () => {
    const db = drizzle({ client: server.pool });
    // The transaction as a Drizzle on another driver shows it: no node-postgres or postgres.js client.
    const hidden = <T extends object>(tx: T) =>
      new Proxy(tx, {
        get(t, p) {
          if (p === 'session') return undefined;
          const value = Reflect.get(t, p, t);
          // Drizzle's own methods run on the transaction itself, which has its session.
          return typeof value === 'function' ? value.bind(t) : value;
        },
      }) as T;
    const message = { type: 'order.expire', aggregateId: 'd' };
    await db.transaction(async (tx) => {
      const executor = fromDrizzle(hidden(tx));
      expect(executor.inTransaction?.()).toBeUndefined();
      await server.backend.store.join(executor, (dt) =>
        dt.schedule('drizzle-only/kept', new Date(Date.now() + HOUR), message),
      );
    });
    expect((await server.backend.store.loadSchedule('drizzle-only/kept'))?.message).toEqual(message);
    const failure = new Error('the application rolls back');
    const outcome = await db
      .transaction(async (tx) => {
        await server.backend.store.join(fromDrizzle(hidden(tx)), (dt) =>
          dt.schedule('drizzle-only/dropped', new Date(Date.now() + HOUR), message),
        );
        throw failure;
      })
      .catch((e: unknown) => e);
    expect(outcome).toBe(failure);
    expect(await server.backend.store.loadSchedule('drizzle-only/dropped')).toBeUndefined();
    const refused = await db
      .transaction(async (tx) => {
        await server.backend.store.join(fromDrizzle(hidden(tx)), (dt) =>
          dt.schedule('', new Date(Date.now() + HOUR), message),
        );
      })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
  });

  it('refuses a pool or a client outside a transaction with an InvalidArgumentError naming handle', async () => {
    const client = await server.pool.connect();
    try {
      for (const handle of [server.pool, client]) {
        const error = await server.backend.store
          .join(handle, (tx) =>
            tx.schedule('never', new Date(Date.now() + HOUR), { type: 'order.expire', aggregateId: 'n' }),
          )
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(InvalidArgumentError);
        expect((error as Error).message).toContain('handle');
      }
    } finally {
      client.release();
    }
    expect(await server.backend.store.loadSchedule('never')).toBeUndefined();
  });

  it("names duetime's statements, so node-postgres prepares them once per connection (unless preparedStatements is off)", async () => {
    const message = { type: 'order.expire', aggregateId: 'p' };
    const prepared = async (client: { query(text: string): Promise<{ rows: unknown[] }> }) =>
      (
        (await client.query(
          "SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE '%put_schedule(%'",
        )) as { rows: { name: string; statement: string }[] }
      ).rows;
    // An executor is handed the name as its third argument, the same name for the same text.
    const names: (string | undefined)[] = [];
    const client = await server.pool.connect();
    try {
      for (const i of [1, 2]) {
        await client.query('BEGIN');
        await server.backend.store.join(recording(fromPg(client), names), (tx) =>
          tx.schedule(`prepared/${i}`, new Date(Date.now() + HOUR), message),
        );
        await client.query('COMMIT');
      }
      expect(names).toHaveLength(2);
      expect(names[0]).toMatch(/^duetime_[0-9a-f]+_[0-9a-f]+$/);
      expect(names[1]).toBe(names[0]);
      // fromPg prepared it on the application's connection, once.
      expect((await prepared(client)).map((row) => row.name)).toEqual([names[0]]);
    } finally {
      client.release(true);
    }
    // A pg client joined as it is takes the name in its config object.
    const raw = await server.pool.connect();
    try {
      await raw.query('BEGIN');
      await server.backend.store.join(raw, (tx) =>
        tx.schedule('prepared/raw', new Date(Date.now() + HOUR), message),
      );
      await raw.query('COMMIT');
      expect((await prepared(raw)).map((row) => row.name)).toEqual([names[0]]);
    } finally {
      raw.release(true);
    }
    // preparedStatements: false (behind a pooler that cannot keep them): no names, nothing prepared.
    const unnamed = await createPostgresBackend(
      { pool: server.pool },
      { schema: server.schema, preparedStatements: false, migrate: false },
    );
    const off = await server.pool.connect();
    try {
      const seen: (string | undefined)[] = [];
      await off.query('BEGIN');
      await unnamed.store.join(recording(fromPg(off), seen), (tx) =>
        tx.schedule('prepared/off', new Date(Date.now() + HOUR), message),
      );
      await off.query('COMMIT');
      expect(seen).toEqual([undefined]);
      expect(await prepared(off)).toEqual([]);
    } finally {
      off.release(true);
      await unnamed.close();
    }
    for (const key of ['prepared/1', 'prepared/2', 'prepared/raw', 'prepared/off'])
      expect((await server.backend.store.loadSchedule(key))?.message, key).toEqual(message);
  });
});
