import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle as drizzleNodePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import knexFactory from 'knex';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import postgres from 'postgres';
import { Sequelize } from 'sequelize';
import { DataSource } from 'typeorm';
import { fromDrizzle } from '../src/drizzle.js';
import type { SqlExecutor } from '../src/executor.js';
import { fromKnex } from '../src/knex.js';
import { fromKysely } from '../src/kysely.js';
import { fromPg } from '../src/pg.js';
import { fromPostgresJs } from '../src/postgres-js.js';
import { fromPrisma } from '../src/prisma.js';
import { fromSequelize } from '../src/sequelize.js';
import { fromTypeORM } from '../src/typeorm.js';

/** The server the tests use (trust auth, database `test`); DUETIME_PG_URL overrides it. */
export const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test';

/** PG_URL with the login name as its user when it names none (libraries differ in their default). */
export function urlWithUser(): string {
  const url = new URL(PG_URL);
  if (!url.username) url.username = process.env.PGUSER ?? process.env.USER ?? 'postgres';
  return url.toString();
}

/**
 * One SQL library, opened on the test server: runs `fn` in a transaction of its own, bound as an
 * executor, committing when `fn` returns and rolling back when it throws (as the library does).
 */
export interface Library {
  name: string;
  transaction<T>(fn: (executor: SqlExecutor, raw: unknown) => Promise<T>): Promise<T>;
  /** Handles of this library that are not an open transaction, each refused by its binding. */
  notTransactions(): Promise<unknown[]>;
  /** The binding itself, for the refusal checks. */
  bind(handle: unknown): SqlExecutor;
  close(): Promise<void>;
}

type Opener = () => Promise<Library>;

export const LIBRARIES: Record<string, Opener> = {
  'node-postgres': async () => {
    const pool = new pg.Pool({ connectionString: urlWithUser(), max: 4 });
    return {
      name: 'node-postgres',
      async transaction(fn) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          const result = await fn(fromPg(client), client);
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => {});
          throw error;
        } finally {
          client.release();
        }
      },
      notTransactions: async () => [pool, null, {}],
      bind: (handle) => fromPg(handle as pg.PoolClient),
      close: () => pool.end(),
    };
  },
  'postgres.js': async () => {
    const sql = postgres(urlWithUser(), { max: 4, onnotice: () => {} });
    return {
      name: 'postgres.js',
      transaction: (fn) => sql.begin((tx) => fn(fromPostgresJs(tx), tx)) as Promise<never>,
      notTransactions: async () => [sql, {}],
      bind: (handle) => fromPostgresJs(handle as never),
      close: () => sql.end(),
    };
  },
  Kysely: async () => {
    const db = new Kysely<Record<string, never>>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: urlWithUser(), max: 4 }) }),
    });
    return {
      name: 'Kysely',
      transaction: (fn) => db.transaction().execute((trx) => fn(fromKysely(trx), trx)),
      notTransactions: async () => [db, 'db'],
      bind: (handle) => fromKysely(handle as never),
      close: () => db.destroy(),
    };
  },
  Knex: async () => {
    const knex = knexFactory({ client: 'pg', connection: urlWithUser(), pool: { min: 0, max: 4 } });
    return {
      name: 'Knex',
      transaction: (fn) => knex.transaction((trx) => fn(fromKnex(trx), trx)),
      async notTransactions() {
        const finished = await knex.transaction();
        await finished.commit();
        return [knex, finished];
      },
      bind: (handle) => fromKnex(handle as never),
      close: () => knex.destroy(),
    };
  },
  'Drizzle (node-postgres)': async () => {
    const pool = new pg.Pool({ connectionString: urlWithUser(), max: 4 });
    const db = drizzleNodePg(pool);
    return {
      name: 'Drizzle (node-postgres)',
      transaction: (fn) => db.transaction((tx) => fn(fromDrizzle(tx), tx)),
      notTransactions: async () => [db, 42],
      bind: (handle) => fromDrizzle(handle as never),
      close: () => pool.end(),
    };
  },
  'Drizzle (postgres.js)': async () => {
    const sql = postgres(urlWithUser(), { max: 4, onnotice: () => {} });
    const db = drizzlePostgresJs(sql);
    return {
      name: 'Drizzle (postgres.js)',
      transaction: (fn) => db.transaction((tx) => fn(fromDrizzle(tx), tx)),
      notTransactions: async () => [db],
      bind: (handle) => fromDrizzle(handle as never),
      close: () => sql.end(),
    };
  },
  Prisma: async () => {
    // Generated before the tests run (package.json `pretest`): Prisma's client for test/prisma/schema.prisma.
    const { PrismaClient } = await import('./prisma/generated/client.js');
    const prisma = new PrismaClient({ adapter: new PrismaPg({ connectionString: urlWithUser() }) });
    return {
      name: 'Prisma',
      transaction: (fn) => prisma.$transaction((tx) => fn(fromPrisma(tx), tx)),
      notTransactions: async () => [prisma, 'prisma'],
      bind: (handle) => fromPrisma(handle as never),
      close: () => prisma.$disconnect(),
    };
  },
  TypeORM: async () => {
    const dataSource = new DataSource({ type: 'postgres', url: urlWithUser(), entities: [], poolSize: 4 });
    await dataSource.initialize();
    return {
      name: 'TypeORM',
      transaction: (fn) => dataSource.transaction((manager) => fn(fromTypeORM(manager), manager)),
      notTransactions: async () => [dataSource.manager, undefined],
      bind: (handle) => fromTypeORM(handle as never),
      close: () => dataSource.destroy(),
    };
  },
  Sequelize: async () => {
    const sequelize = new Sequelize(urlWithUser(), { dialect: 'postgres', logging: false, pool: { max: 4 } });
    return {
      name: 'Sequelize',
      transaction: (fn) => sequelize.transaction((t) => fn(fromSequelize(t), t)),
      async notTransactions() {
        const finished = await sequelize.transaction();
        await finished.rollback();
        return [sequelize, finished, {}];
      },
      bind: (handle) => fromSequelize(handle as never),
      close: () => sequelize.close(),
    };
  },
};
