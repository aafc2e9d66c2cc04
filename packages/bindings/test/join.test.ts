import { InvalidArgumentError } from '@duetime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LIBRARIES, type Library } from './libraries.js';
import { dispatchUntil, useBackend } from './server.js';

const HOUR = 3_600_000;
const expire = (id: string) => ({ type: 'order.expire', aggregateId: id });

const server = useBackend('bindings_join', async (pool, schema) => {
  await pool.query(`CREATE TABLE IF NOT EXISTS "${schema}".orders (id text PRIMARY KEY)`);
});

async function orders(prefix: string): Promise<string[]> {
  const { rows } = await server.pool.query<{ id: string }>(
    `SELECT id FROM "${server.schema}".orders WHERE id LIKE $1 ORDER BY id`,
    [`${prefix}%`],
  );
  return rows.map((r) => r.id);
}

async function scheduled(prefix: string): Promise<string[]> {
  return (await server.backend.store.pageSchedules({ prefix })).items.map((s) => s.key);
}

describe.each(Object.keys(LIBRARIES))('store.join through the %s binding', (name) => {
  let library: Library;
  const p = `${name.replace(/\W+/g, '-')}/`;

  beforeAll(async () => {
    library = await LIBRARIES[name]!();
  });
  afterAll(() => library?.close());

  it('commits the schedule with the application’s own row, and a dispatcher delivers it', async () => {
    await library.transaction(async (executor) => {
      await executor.query(`INSERT INTO "${server.schema}".orders (id) VALUES ($1)`, [`${p}1`]);
      await server.backend.store.join(executor, async (tx) => {
        await tx.schedule(`${p}1/expire`, new Date(Date.now() - 1), expire(`${p}1`));
        expect(await tx.loadSchedule(`${p}1/expire`)).toBeDefined();
      });
      // Not visible outside the application's transaction before its commit.
      expect(await scheduled(`${p}1/`)).toEqual([]);
    });
    expect(await orders(`${p}1`)).toEqual([`${p}1`]);
    expect(await scheduled(`${p}1/`)).toEqual([`${p}1/expire`]);
    const seen: string[] = [];
    await dispatchUntil(
      server.backend,
      {
        processor: async (_tx, _message, { schedule }) => {
          if (schedule.key.startsWith(p)) seen.push(schedule.key);
        },
      },
      () => seen.length > 0,
    );
    expect(seen).toEqual([`${p}1/expire`]);
  });

  it('tells its transaction state without a round trip where the library can, and a one-schedule join still commits', async () => {
    // Libraries whose open transaction reports its state (else the store asks with a savepoint).
    const tells = ['node-postgres', 'Drizzle (node-postgres)', 'Knex', 'TypeORM', 'Sequelize'];
    let kept: { inTransaction?: () => boolean | undefined } | undefined;
    await library.transaction(async (executor) => {
      kept = executor;
      expect(executor.inTransaction?.()).toBe(tells.includes(name) ? true : undefined);
      await executor.query(`INSERT INTO "${server.schema}".orders (id) VALUES ($1)`, [`${p}s`]);
      await server.backend.store.join(executor, (tx) =>
        tx.schedule(`${p}s/expire`, new Date(Date.now() + HOUR), expire(`${p}s`)),
      );
    });
    expect(await orders(`${p}s`)).toEqual([`${p}s`]);
    expect(await scheduled(`${p}s/`)).toEqual([`${p}s/expire`]);
    // Once the transaction ended, a library that tells says so (the store then refuses the handle).
    if (tells.includes(name)) expect(kept?.inTransaction?.()).toBe(false);
  });

  it('discards the schedule when the application rolls back, and undoes only its own writes when its function throws', async () => {
    await expect(
      library.transaction(async (executor) => {
        await executor.query(`INSERT INTO "${server.schema}".orders (id) VALUES ($1)`, [`${p}2`]);
        await server.backend.store.join(executor, (tx) =>
          tx.schedule(`${p}2/expire`, new Date(Date.now() + HOUR), expire(`${p}2`)),
        );
        throw new Error('payment refused');
      }),
    ).rejects.toThrow('payment refused');
    expect(await orders(`${p}2`)).toEqual([]);
    expect(await scheduled(`${p}2/`)).toEqual([]);

    await library.transaction(async (executor) => {
      await executor.query(`INSERT INTO "${server.schema}".orders (id) VALUES ($1)`, [`${p}3`]);
      await expect(
        server.backend.store.join(executor, async (tx) => {
          await tx.schedule(`${p}3/expire`, new Date(Date.now() + HOUR), expire(`${p}3`));
          throw new Error('not this one');
        }),
      ).rejects.toThrow('not this one');
      // The application's transaction goes on.
      await server.backend.store.join(executor, (tx) =>
        tx.schedule(`${p}3/remind`, new Date(Date.now() + HOUR), expire(`${p}3`)),
      );
    });
    expect(await orders(`${p}3`)).toEqual([`${p}3`]);
    expect(await scheduled(`${p}3/`)).toEqual([`${p}3/remind`]);
  });

  it('cancels and replaces inside the application’s transaction, by key and by prefix', async () => {
    await server.backend.store.transact(async (tx) => {
      for (const k of ['a', 'b', 'c'])
        await tx.schedule(`${p}4/${k}`, new Date(Date.now() + HOUR), expire(k));
    });
    await library.transaction((executor) =>
      server.backend.store.join(executor, async (tx) => {
        expect(await tx.cancelSchedule(`${p}4/a`)).toBe(true);
        await tx.schedule(`${p}4/b`, new Date(Date.now() + 2 * HOUR), expire('b2'));
        expect(await tx.cancelSchedulePrefix(`${p}4/c`)).toBe(1);
      }),
    );
    const left = (await server.backend.store.pageSchedules({ prefix: `${p}4/` })).items;
    expect(left.map((s) => [s.key, s.message.aggregateId])).toEqual([[`${p}4/b`, 'b2']]);
  });
});

describe('store.join refusals', () => {
  it('refuses a pool or a client outside a transaction with an InvalidArgumentError naming handle', async () => {
    const client = await server.pool.connect();
    try {
      for (const handle of [server.pool, client]) {
        const error = await server.backend.store
          .join(handle, (tx) => tx.schedule('never', new Date(Date.now() + HOUR), expire('n')))
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
