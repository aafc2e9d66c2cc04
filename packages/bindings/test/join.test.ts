import { InvalidArgumentError, type SqlExecutor } from '@duetime/core';
import { drizzle } from 'drizzle-orm/node-postgres';
import { describe, expect, it } from 'vitest';
import { fromDrizzle } from '../src/drizzle.js';
import { useBackend } from './server.js';
import { TARGETS } from './targets/index.js';

// store.join through each library's binding is the binding conformance group's (conformance.test.ts);
// here, what differs between the libraries, and the store's own refusals.

const HOUR = 3_600_000;
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
});
