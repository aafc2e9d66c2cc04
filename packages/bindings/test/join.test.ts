import { InvalidArgumentError, type SqlExecutor } from '@duetime/core';
import { describe, expect, it } from 'vitest';
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
