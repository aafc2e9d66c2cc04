import type { BindingTarget } from '@duetime/bindings/conformance';
import type { TransactionRunner } from '@duetime/core';
import type pg from 'pg';
import { DataTypes, type ModelStatic, Sequelize, type Transaction } from 'sequelize';
import { fromSequelize, sequelizeTransactions, toSequelize } from '../../src/sequelize.js';

interface Db {
  sequelize: Sequelize;
  Effect: ModelStatic<never>;
}

/** Sequelize: `fromSequelize(t)` and `toSequelize(sequelize, tx.sql)` (its transactions nest as savepoints). */
export const target: BindingTarget<Db> = {
  name: 'Sequelize',
  async open({ url, schema }) {
    const sequelize = new Sequelize(url, { dialect: 'postgres', logging: false, pool: { max: 4 } });
    const Effect = sequelize.define(
      'Effect',
      { key: { type: DataTypes.TEXT, primaryKey: true }, via: { type: DataTypes.TEXT, allowNull: false } },
      { tableName: 'effects', schema, timestamps: false },
    ) as ModelStatic<never>;
    return { sequelize, Effect };
  },
  close: ({ sequelize }) => sequelize.close(),
  transaction: ({ sequelize }, fn) => sequelize.transaction((t) => fn(fromSequelize(t), t)),
  async rollback({ sequelize }, fn) {
    const t = await sequelize.transaction();
    try {
      await fn(fromSequelize(t), t);
    } finally {
      await t.rollback();
    }
  },
  failStatement: ({ sequelize }, t) => sequelize.query('SELECT 1/0', { transaction: t as Transaction }),
  async notTransactions({ sequelize }) {
    const finished = await sequelize.transaction();
    await finished.rollback();
    return [sequelize, finished, {}];
  },
  bind: (handle) => fromSequelize(handle as never),
  write: ({ sequelize, Effect }, client, key) =>
    Effect.create({ key, via: 'Sequelize' } as never, {
      transaction: toSequelize(sequelize, client as pg.PoolClient),
    }).then(() => {}),
  nested: {
    savepoint: ({ sequelize, Effect }, client, key, failure) =>
      sequelize.transaction(
        { transaction: toSequelize(sequelize, client as pg.PoolClient) },
        async (inner) => {
          await Effect.create({ key, via: 'Sequelize' } as never, { transaction: inner });
          throw failure;
        },
      ),
  },
  bindDelivery: ({ sequelize }, handle) => toSequelize(sequelize, handle as never),
};

/** Sequelize, processors in its own transactions: `sequelizeTransactions(sequelize)`, `tx.sql` its `t`. */
export const hosted: BindingTarget<Db> = {
  name: 'Sequelize, its own transactions',
  open: target.open,
  close: target.close,
  transactions: ({ sequelize }) => sequelizeTransactions(sequelize) as TransactionRunner<unknown>,
  write: ({ Effect }, t, key) =>
    Effect.create({ key, via: 'Sequelize' } as never, { transaction: t as Transaction }).then(() => {}),
};
