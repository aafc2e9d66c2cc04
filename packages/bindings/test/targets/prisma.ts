import type { BindingTarget } from '@duetime/bindings/conformance';
import type { TransactionRunner } from '@duetime/core';
import { PrismaPg } from '@prisma/adapter-pg';
import type pg from 'pg';
import { fromPrisma, prismaTransactions, toPrisma } from '../../src/prisma.js';
import type { PrismaClient } from '../prisma/generated/client.js';

interface Db {
  prisma: PrismaClient;
  /** The application's client on the pool `toPrisma` hands it (the delivery's client). */
  create: (pool: pg.Pool) => PrismaClient;
}

/** Prisma 7 with adapter-pg: `fromPrisma(tx)` and `toPrisma(tx.sql, create)`; no explicit rollback. */
export const target: BindingTarget<Db> = {
  name: 'Prisma',
  async open({ url, schema }) {
    // Generated before the tests run (package.json `test`): Prisma's client for test/prisma/schema.prisma.
    const { PrismaClient } = await import('../prisma/generated/client.js');
    return {
      prisma: new PrismaClient({ adapter: new PrismaPg({ connectionString: url }) }),
      create: (pool) => new PrismaClient({ adapter: new PrismaPg(pool, { schema }) }),
    };
  },
  close: ({ prisma }) => prisma.$disconnect(),
  transaction: ({ prisma }, fn) => prisma.$transaction((tx) => fn(fromPrisma(tx), tx)),
  failStatement: (_db, tx) => (tx as PrismaClient).$executeRawUnsafe('SELECT 1/0'),
  notTransactions: async ({ prisma }) => [prisma, 'prisma'],
  bind: (handle) => fromPrisma(handle as never),
  write: ({ create }, client, key) =>
    toPrisma(client as pg.PoolClient, create)
      .effect.create({ data: { key, via: 'Prisma' } })
      .then(() => {}),
  nested: {
    refused: ({ create }, client) => toPrisma(client as pg.PoolClient, create).$transaction(async () => {}),
  },
  bindDelivery: ({ create }, handle) => toPrisma(handle as never, create),
};

/** Prisma, processors in its own interactive transactions: `prismaTransactions(prisma)`, `tx.sql` its client. */
export const hosted: BindingTarget<{ prisma: PrismaClient }> = {
  name: 'Prisma, its own transactions',
  async open({ url, schema }) {
    const { PrismaClient } = await import('../prisma/generated/client.js');
    return { prisma: new PrismaClient({ adapter: new PrismaPg({ connectionString: url }, { schema }) }) };
  },
  close: ({ prisma }) => prisma.$disconnect(),
  transactions: ({ prisma }) => prismaTransactions(prisma) as TransactionRunner<unknown>,
  write: (_db, tx, key) =>
    (tx as PrismaClient).effect.create({ data: { key, via: 'Prisma' } }).then(() => {}),
};
