import { InvalidArgumentError } from '@duetime/core';
import type pg from 'pg';
import { QueryTypes, Sequelize } from 'sequelize';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toKnex } from '../src/knex.js';
import { toPrisma } from '../src/prisma.js';
import { toSequelize } from '../src/sequelize.js';
import { toTypeORM } from '../src/typeorm.js';
import { dispatchUntil, urlWithUser, useBackend } from './server.js';
import { TARGETS, type Target } from './targets/index.js';

const server = useBackend('bindings_processors', (pool, schema) =>
  pool.query(`CREATE TABLE "${schema}".effects (key text PRIMARY KEY, via text NOT NULL)`).then(() => {}),
);

/** The libraries whose instance on a client is made once per delivery transaction. */
const INSTANCES: Record<
  string,
  { target: Target; instance(library: never, client: pg.PoolClient): unknown }
> = {
  Knex: { target: TARGETS.Knex!, instance: (_library, client) => toKnex(client) },
  Prisma: {
    target: TARGETS.Prisma!,
    instance: (library: { create: (pool: pg.Pool) => unknown }, client) => toPrisma(client, library.create),
  },
};

// Processors writing through each library are the binding conformance group's (conformance.test.ts);
// here, what only some libraries do.

describe.each(Object.keys(INSTANCES))('processors writing through %s on the delivery transaction', (name) => {
  const {
    target: { target },
    instance,
  } = INSTANCES[name]!;
  let library: unknown;
  beforeAll(async () => {
    library = await target.open({ url: server.url, schema: server.schema });
  });
  afterAll(() => library !== undefined && target.close(library));

  it('is made once per delivery transaction: the messages of a batch share it', async () => {
    const p = `${name}-shared/`;
    const instances = new Map<string, unknown>();
    const deliver = async (keys: string[]) => {
      await server.backend.store.transact(async (tx) => {
        for (const key of keys) await tx.schedule(key, new Date(Date.now() - 1000), { type: 'effect' });
      });
      await dispatchUntil(
        server.backend,
        {
          // One batch for the three, however slow the first message's processor is.
          batchSize: 10,
          batchDuration: 60_000,
          processor: async (tx, _message, { schedule }) => {
            if (!schedule.key.startsWith(p)) return;
            instances.set(schedule.key, instance(library as never, tx.sql));
            expect(instance(library as never, tx.sql)).toBe(instances.get(schedule.key));
            await target.write!(library, tx.sql, schedule.key);
          },
        },
        async () => (await server.backend.store.countSchedules({ prefix: p })) === 0,
      );
    };
    await deliver([`${p}a`, `${p}b`, `${p}c`]);
    await deliver([`${p}d`]);
    expect(new Set(['a', 'b', 'c'].map((k) => instances.get(`${p}${k}`))).size).toBe(1);
    expect(instances.get(`${p}d`)).not.toBe(instances.get(`${p}a`));
    const { rows } = await server.pool.query(
      `SELECT key FROM "${server.schema}".effects WHERE key LIKE $1 ORDER BY key`,
      [`${p}%`],
    );
    expect(rows.map((r) => r.key)).toEqual(['a', 'b', 'c', 'd'].map((k) => `${p}${k}`));
  });
});

describe('the processor bindings’ other arguments', () => {
  it('refuses a wrong one with an InvalidArgumentError naming it', () => {
    const calls: [string, () => unknown][] = [
      ['handle', () => toTypeORM({ options: { type: 'mysql' } } as never, server.pool as never)],
      ['create', () => toPrisma({ query() {} } as never, 'prisma' as never)],
      ['handle', () => toSequelize({ getDialect: () => 'mysql' } as never, { query() {} })],
    ];
    for (const [field, call] of calls) {
      expect(call).toThrow(InvalidArgumentError);
      expect(call).toThrow(field);
    }
  });
});

describe('toSequelize', () => {
  it('refuses to commit, roll back or take afterCommit hooks: duetime ends the delivery’s transaction', async () => {
    const sequelize = new Sequelize(urlWithUser(), { dialect: 'postgres', logging: false, pool: { max: 1 } });
    try {
      const client = await server.pool.connect();
      try {
        const transaction = toSequelize(sequelize, client);
        await expect(transaction.commit()).rejects.toThrow(InvalidArgumentError);
        await expect(transaction.rollback()).rejects.toThrow(InvalidArgumentError);
        expect(() => transaction.afterCommit(() => {})).toThrow(InvalidArgumentError);
      } finally {
        client.release();
      }
    } finally {
      await sequelize.close();
    }
  });

  it('runs Sequelize’s statements with the type parsers of its own connections', async () => {
    const sequelize = new Sequelize(urlWithUser(), { dialect: 'postgres', logging: false, pool: { max: 1 } });
    try {
      await sequelize.authenticate();
      const p = 'Sequelize-types/';
      await server.backend.store.transact((tx) =>
        tx.schedule(`${p}x`, new Date(Date.now() - 1000), { type: 'effect' }),
      );
      const read: unknown[] = [];
      await dispatchUntil(
        server.backend,
        {
          processor: async (tx, _message, { schedule }) => {
            if (!schedule.key.startsWith(p)) return;
            const transaction = toSequelize(sequelize, tx.sql);
            read.push(
              await sequelize.query(`SELECT DATE '2026-12-04' AS d, 12345678901234::bigint AS n`, {
                transaction,
                type: QueryTypes.SELECT,
                plain: true,
              }),
            );
            // node-postgres's own parsers on the same client: a Date.
            read.push((await tx.sql.query(`SELECT DATE '2026-12-04' AS d`)).rows[0]);
          },
        },
        () => read.length === 2,
      );
      // DATEONLY reads as Sequelize reads it on its connections (a string), not as node-postgres does.
      expect(read[0]).toEqual({ d: '2026-12-04', n: '12345678901234' });
      expect((read[1] as { d: unknown }).d).toBeInstanceOf(Date);
    } finally {
      await sequelize.close();
    }
  });
});
