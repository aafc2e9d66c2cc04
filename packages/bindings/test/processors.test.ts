import { createPostgresBackend } from '@duetime/backend-postgres';
import { Dispatcher, InvalidArgumentError } from '@duetime/core';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toDrizzle } from '../src/drizzle.js';
import { toKysely } from '../src/kysely.js';
import { urlWithUser } from './libraries.js';

const schema = `bindings_processors_${process.pid}`;
let pool: pg.Pool;
let backend: Awaited<ReturnType<typeof createPostgresBackend>>;

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: urlWithUser(), max: 6 });
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    throw new Error(
      `PostgreSQL is not reachable at ${urlWithUser()} (set DUETIME_PG_URL to use another server); start it with \`bash scripts/services.sh up\`: ${(error as Error).message}`,
    );
  }
  backend = await createPostgresBackend({ pool }, { schema });
  await pool.query(`CREATE TABLE "${schema}".effects (key text PRIMARY KEY, via text NOT NULL)`);
});

afterAll(async () => {
  await backend?.close();
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
});

interface Db {
  effects: { key: string; via: string };
}

describe.each(['Drizzle', 'Kysely'])('processors writing through %s on the delivery transaction', (via) => {
  const write = async (client: pg.PoolClient, key: string) => {
    if (via === 'Drizzle')
      await toDrizzle(client).execute(
        sql`INSERT INTO ${sql.raw(`"${schema}".effects`)} (key, via) VALUES (${key}, ${via})`,
      );
    else await toKysely<Db>(client).withSchema(schema).insertInto('effects').values({ key, via }).execute();
  };

  it('commits each processor’s writes with the consumption; a throwing one rolls back only its own, and is retried', async () => {
    const p = `${via}/`;
    await backend.store.transact(async (tx) => {
      for (const k of ['a', 'b', 'c'])
        await tx.schedule(`${p}${k}`, new Date(Date.now() - 1000), { type: 'effect' });
    });
    let failedOnce = false;
    const dispatcher = new Dispatcher({
      store: backend.store,
      batchSize: 10,
      retryDelay: 10,
      processor: async (tx, _message, { schedule }) => {
        if (!schedule.key.startsWith(p)) return;
        await write(tx.sql, schedule.key);
        if (schedule.key.endsWith('/b') && !failedOnce) {
          failedOnce = true;
          throw new Error('the first attempt fails after writing');
        }
      },
    });
    const running = dispatcher.run();
    const deadline = Date.now() + 20_000;
    while ((await backend.store.countSchedules({ prefix: p })) > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    await dispatcher.drain();
    await running;
    expect(failedOnce).toBe(true);
    const { rows } = await pool.query(
      `SELECT key, via FROM "${schema}".effects WHERE key LIKE $1 ORDER BY key`,
      [`${p}%`],
    );
    expect(rows).toEqual(['a', 'b', 'c'].map((k) => ({ key: `${p}${k}`, via })));
    expect(await backend.store.countSchedules({ prefix: p })).toBe(0);
  });

  it('refuses to begin a transaction of its own inside the delivery', async () => {
    const p = `${via}-nested/`;
    await backend.store.transact((tx) =>
      tx.schedule(`${p}x`, new Date(Date.now() - 1000), { type: 'effect' }),
    );
    const errors: unknown[] = [];
    const dispatcher = new Dispatcher({
      store: backend.store,
      maxAttempts: 1,
      processor: async (tx, _message, { schedule }) => {
        if (!schedule.key.startsWith(p)) return;
        try {
          if (via === 'Drizzle') await toDrizzle(tx.sql).transaction(async () => {});
          else
            await toKysely<Db>(tx.sql)
              .transaction()
              .execute(async () => {});
        } catch (error) {
          errors.push(error);
        }
      },
    });
    const running = dispatcher.run();
    const deadline = Date.now() + 20_000;
    while (errors.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await dispatcher.drain();
    await running;
    // Drizzle wraps the driver's error in its own (`cause`).
    const refusal = [errors[0], (errors[0] as { cause?: unknown })?.cause].find(
      (e) => e instanceof InvalidArgumentError,
    );
    expect(refusal, String(errors[0])).toBeInstanceOf(InvalidArgumentError);
    expect((refusal as Error).message).toContain('tx.sql');
  });
});
