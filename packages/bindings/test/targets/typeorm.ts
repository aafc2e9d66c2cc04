import type { BindingTarget } from '@duetime/bindings/conformance';
import type { TransactionRunner } from '@duetime/core';
import type pg from 'pg';
import { DataSource, type EntityManager, EntitySchema } from 'typeorm';
import { fromTypeORM, toTypeORM, typeormTransactions } from '../../src/typeorm.js';

interface Effect {
  key: string;
  via: string;
}

interface Db {
  dataSource: DataSource;
  Effect: EntitySchema<Effect>;
}

/** TypeORM: `fromTypeORM(manager)` and `toTypeORM(dataSource, tx.sql)` (its transactions nest as savepoints). */
export const target: BindingTarget<Db> = {
  name: 'TypeORM',
  async open({ url, schema }) {
    const Effect = new EntitySchema<Effect>({
      name: 'Effect',
      tableName: 'effects',
      schema,
      columns: { key: { type: String, primary: true }, via: { type: String } },
    });
    const dataSource = new DataSource({ type: 'postgres', url, entities: [Effect], poolSize: 4 });
    await dataSource.initialize();
    return { dataSource, Effect };
  },
  close: ({ dataSource }) => dataSource.destroy(),
  transaction: ({ dataSource }, fn) => dataSource.transaction((manager) => fn(fromTypeORM(manager), manager)),
  async rollback({ dataSource }, fn) {
    const runner = dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.startTransaction();
      try {
        await fn(fromTypeORM(runner.manager), runner.manager);
      } finally {
        await runner.rollbackTransaction();
      }
    } finally {
      await runner.release();
    }
  },
  failStatement: (_db, manager) => (manager as EntityManager).query('SELECT 1/0'),
  notTransactions: async ({ dataSource }) => [dataSource.manager, undefined],
  bind: (handle) => fromTypeORM(handle as never),
  write: ({ dataSource, Effect }, client, key) =>
    toTypeORM(dataSource, client as pg.PoolClient)
      .getRepository(Effect)
      .save({ key, via: 'TypeORM' })
      .then(() => {}),
  nested: {
    savepoint: ({ dataSource, Effect }, client, key, failure) =>
      toTypeORM(dataSource, client as pg.PoolClient).transaction(async (manager) => {
        await manager.insert(Effect, { key, via: 'TypeORM' });
        throw failure;
      }),
  },
  bindDelivery: ({ dataSource }, handle) => toTypeORM(dataSource, handle as never),
};

/** TypeORM, processors in its own transactions: `typeormTransactions(dataSource)`, `tx.sql` its manager. */
export const hosted: BindingTarget<Db> = {
  name: 'TypeORM, its own transactions',
  open: target.open,
  close: target.close,
  transactions: ({ dataSource }) => typeormTransactions(dataSource) as TransactionRunner<unknown>,
  write: ({ Effect }, manager, key) =>
    (manager as EntityManager).insert(Effect, { key, via: 'TypeORM' }).then(() => {}),
};
