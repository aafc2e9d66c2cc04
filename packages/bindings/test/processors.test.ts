import { InvalidArgumentError } from '@duetime/core';
import { PrismaPg } from '@prisma/adapter-pg';
import { sql } from 'drizzle-orm';
import type pg from 'pg';
import { DataTypes, QueryTypes, Sequelize } from 'sequelize';
import { DataSource, EntitySchema } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toDrizzle } from '../src/drizzle.js';
import { toKnex } from '../src/knex.js';
import { toKysely } from '../src/kysely.js';
import { toPrisma } from '../src/prisma.js';
import { toSequelize } from '../src/sequelize.js';
import { toTypeORM } from '../src/typeorm.js';
import { urlWithUser } from './libraries.js';
import { dispatchUntil, useBackend } from './server.js';

const server = useBackend('bindings_processors', (pool, schema) =>
  pool.query(`CREATE TABLE "${schema}".effects (key text PRIMARY KEY, via text NOT NULL)`).then(() => {}),
);

interface Db {
  effects: { key: string; via: string };
}

/** A library put on the delivery's client, opened once for its tests. */
interface Via {
  /** Writes the row (key, via) through the library on the delivery's client. */
  write(client: pg.PoolClient, key: string): Promise<void>;
  /**
   * The library's own transaction on the delivery's client: `refused` begins one (the refusal is expected),
   * `savepoint` writes `key` in a nested one that throws (its write is expected undone).
   */
  nested:
    | { refused: (client: pg.PoolClient) => Promise<unknown> }
    | { savepoint: (client: pg.PoolClient, key: string) => Promise<unknown> };
  /** For the libraries made once per delivery transaction: the instance on this client. */
  instance?(client: pg.PoolClient): unknown;
  /** Calls with another argument wrong, each refused with an InvalidArgumentError naming that argument. */
  wrongArguments?: Record<string, () => unknown>;
  /** The binding on a handle, for the refusals. */
  bind(handle: unknown): unknown;
  close?(): Promise<void>;
}

const VIAS: Record<string, (schema: string) => Promise<Via>> = {
  Drizzle: async (schema) => ({
    write: (client, key) =>
      toDrizzle(client)
        .execute(sql`INSERT INTO ${sql.raw(`"${schema}".effects`)} (key, via) VALUES (${key}, 'Drizzle')`)
        .then(() => {}),
    nested: { refused: (client) => toDrizzle(client).transaction(async () => {}) },
    bind: (handle) => toDrizzle(handle as never),
  }),
  Kysely: async (schema) => ({
    write: (client, key) =>
      toKysely<Db>(client)
        .withSchema(schema)
        .insertInto('effects')
        .values({ key, via: 'Kysely' })
        .execute()
        .then(() => {}),
    nested: {
      refused: (client) =>
        toKysely<Db>(client)
          .transaction()
          .execute(async () => {}),
    },
    bind: (handle) => toKysely(handle as never),
  }),
  Knex: async (schema) => ({
    write: (client, key) =>
      toKnex(client)('effects')
        .withSchema(schema)
        .insert({ key, via: 'Knex' })
        .then(() => {}),
    nested: { refused: (client) => toKnex(client).transaction(async () => {}) },
    instance: (client) => toKnex(client),
    bind: (handle) => toKnex(handle as never),
  }),
  TypeORM: async (schema) => {
    const Effect = new EntitySchema<{ key: string; via: string }>({
      name: 'Effect',
      tableName: 'effects',
      schema,
      columns: { key: { type: String, primary: true }, via: { type: String } },
    });
    const dataSource = new DataSource({
      type: 'postgres',
      url: urlWithUser(),
      entities: [Effect],
      poolSize: 2,
    });
    await dataSource.initialize();
    return {
      write: (client, key) =>
        toTypeORM(dataSource, client)
          .getRepository(Effect)
          .save({ key, via: 'TypeORM' })
          .then(() => {}),
      nested: {
        savepoint: (client, key) =>
          toTypeORM(dataSource, client).transaction(async (manager) => {
            await manager.insert(Effect, { key, via: 'TypeORM' });
            throw new Error('the nested part fails');
          }),
      },
      bind: (handle) => toTypeORM(dataSource, handle as never),
      wrongArguments: {
        handle: () => toTypeORM({ options: { type: 'mysql' } } as never, server.pool as never),
      },
      close: () => dataSource.destroy(),
    };
  },
  Prisma: async (schema) => {
    const { PrismaClient } = await import('./prisma/generated/client.js');
    const create = (pool: pg.Pool) => new PrismaClient({ adapter: new PrismaPg(pool, { schema }) });
    return {
      write: (client, key) =>
        toPrisma(client, create)
          .effect.create({ data: { key, via: 'Prisma' } })
          .then(() => {}),
      nested: { refused: (client) => toPrisma(client, create).$transaction(async () => {}) },
      instance: (client) => toPrisma(client, create),
      bind: (handle) => toPrisma(handle as never, create),
      wrongArguments: { create: () => toPrisma({ query() {} } as never, 'prisma' as never) },
    };
  },
  Sequelize: async (schema) => {
    const sequelize = new Sequelize(urlWithUser(), { dialect: 'postgres', logging: false, pool: { max: 2 } });
    const Effect = sequelize.define(
      'Effect',
      { key: { type: DataTypes.TEXT, primaryKey: true }, via: { type: DataTypes.TEXT, allowNull: false } },
      { tableName: 'effects', schema, timestamps: false },
    );
    return {
      write: (client, key) =>
        Effect.create({ key, via: 'Sequelize' }, { transaction: toSequelize(sequelize, client) }).then(
          () => {},
        ),
      nested: {
        savepoint: (client, key) =>
          sequelize.transaction({ transaction: toSequelize(sequelize, client) }, async (inner) => {
            await Effect.create({ key, via: 'Sequelize' }, { transaction: inner });
            throw new Error('the nested part fails');
          }),
      },
      bind: (handle) => toSequelize(sequelize, handle as never),
      wrongArguments: { handle: () => toSequelize({ getDialect: () => 'mysql' } as never, { query() {} }) },
      close: () => sequelize.close(),
    };
  },
};

/** The libraries whose instance on a client is made once per delivery transaction. */
const VIA_INSTANCES = ['Knex', 'Prisma'];

describe.each(Object.keys(VIAS))('processors writing through %s on the delivery transaction', (name) => {
  let via: Via;
  beforeAll(async () => {
    via = await VIAS[name]!(server.schema);
  });
  afterAll(() => via?.close?.());

  const effects = async (prefix: string) =>
    (
      await server.pool.query(
        `SELECT key, via FROM "${server.schema}".effects WHERE key LIKE $1 ORDER BY key`,
        [`${prefix}%`],
      )
    ).rows;
  const due = (keys: string[]) =>
    server.backend.store.transact(async (tx) => {
      for (const key of keys) await tx.schedule(key, new Date(Date.now() - 1000), { type: 'effect' });
    });

  it('commits each processor’s writes with the consumption; a throwing one rolls back only its own, and is retried', async () => {
    const p = `${name}/`;
    await due(['a', 'b', 'c'].map((k) => `${p}${k}`));
    const attempts: string[] = [];
    const seenOutside: unknown[] = [];
    await dispatchUntil(
      server.backend,
      {
        // a, b and c in one batch (b's retry comes in a later one).
        batchSize: 10,
        batchDuration: 60_000,
        retryDelay: 10,
        processor: async (tx, _message, { schedule }) => {
          if (!schedule.key.startsWith(p)) return;
          attempts.push(schedule.key);
          await via.write(tx.sql, schedule.key);
          // Written in the delivery's transaction: nothing of it is visible outside before its commit.
          seenOutside.push(...(await effects(schedule.key)));
          if (schedule.key.endsWith('/b') && attempts.filter((k) => k === schedule.key).length === 1)
            throw new Error('the first attempt fails after writing');
        },
      },
      async () => (await server.backend.store.countSchedules({ prefix: p })) === 0,
    );
    expect(seenOutside).toEqual([]);
    expect(attempts.sort()).toEqual([`${p}a`, `${p}b`, `${p}b`, `${p}c`]);
    expect(await effects(p)).toEqual(['a', 'b', 'c'].map((k) => ({ key: `${p}${k}`, via: name })));
    expect(await server.backend.store.countSchedules({ prefix: p })).toBe(0);
  });

  it('keeps the library’s own transactions inside the delivery: refused, or nested as a savepoint', async () => {
    const p = `${name}-nested/`;
    await due([`${p}x`]);
    const outcomes: unknown[] = [];
    await dispatchUntil(
      server.backend,
      {
        maxAttempts: 1,
        processor: async (tx, _message, { schedule }) => {
          if (!schedule.key.startsWith(p)) return;
          await via.write(tx.sql, `${p}outer`);
          const nested = via.nested;
          const attempt =
            'refused' in nested ? nested.refused(tx.sql) : nested.savepoint(tx.sql, `${p}inner`);
          outcomes.push(
            await attempt.then(
              () => 'no error',
              (error: unknown) => error,
            ),
          );
        },
      },
      async () => outcomes.length > 0 && (await server.backend.store.countSchedules({ prefix: p })) === 0,
    );
    expect(outcomes).toHaveLength(1);
    if ('refused' in via.nested) {
      // Libraries wrap the driver's error in their own (`cause`).
      const chain: unknown[] = [];
      for (let e = outcomes[0]; e && chain.length < 5; e = (e as { cause?: unknown }).cause) chain.push(e);
      const refusal = chain.find((e) => e instanceof InvalidArgumentError);
      expect(refusal, String(outcomes[0])).toBeInstanceOf(InvalidArgumentError);
      expect((refusal as Error).message).toContain('tx.sql');
    } else expect((outcomes[0] as Error).message).toBe('the nested part fails');
    // The processor's own write commits with the delivery; the nested part's does not.
    expect((await effects(p)).map((r) => r.key)).toEqual([`${p}outer`]);
  });

  if (VIA_INSTANCES.includes(name))
    it('is made once per delivery transaction: the messages of a batch share it', async () => {
      const p = `${name}-shared/`;
      const instances = new Map<string, unknown>();
      const deliver = async (keys: string[]) => {
        await due(keys);
        await dispatchUntil(
          server.backend,
          {
            // One batch for the three, however slow the first message's processor is.
            batchSize: 10,
            batchDuration: 60_000,
            processor: async (tx, _message, { schedule }) => {
              if (!schedule.key.startsWith(p)) return;
              instances.set(schedule.key, via.instance!(tx.sql));
              expect(via.instance!(tx.sql)).toBe(instances.get(schedule.key));
              await via.write(tx.sql, schedule.key);
            },
          },
          async () => (await server.backend.store.countSchedules({ prefix: p })) === 0,
        );
      };
      await deliver([`${p}a`, `${p}b`, `${p}c`]);
      await deliver([`${p}d`]);
      expect(new Set(['a', 'b', 'c'].map((k) => instances.get(`${p}${k}`))).size).toBe(1);
      expect(instances.get(`${p}d`)).not.toBe(instances.get(`${p}a`));
      expect((await effects(p)).map((r) => r.key)).toEqual(['a', 'b', 'c', 'd'].map((k) => `${p}${k}`));
    });

  it('refuses a handle that is not a client, and a wrong argument, with an InvalidArgumentError naming it', async () => {
    for (const handle of [null, {}, 'tx.sql', server.pool]) {
      let error: unknown;
      try {
        via.bind(handle);
      } catch (e) {
        error = e;
      }
      expect(error, `binding ${String(handle)}`).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).message).toContain('handle');
    }
    for (const [field, call] of Object.entries(via.wrongArguments ?? {})) {
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
