import { BackendError, InvalidArgumentError, type SqlExecutor, type TransactionRunner } from '@duetime/core';
import type { Connection, PostgresExecutor } from './connection.js';

export type { TransactionRunner };

/** A transaction the application's library holds open for a unit, until the unit ends it. */
export interface Hosted {
  readonly exec: PostgresExecutor;
  readonly handle: unknown;
  /** Whether the transaction takes statements sent without waiting (the executor's `concurrent`). */
  readonly concurrent: boolean;
  /** Lets the runner's function return (the library commits) or throw (it rolls back), and waits for it. */
  end(commit: boolean): Promise<void>;
}

/** Thrown inside the runner's function to have the library roll back; never seen outside. */
class RollbackRequest extends Error {}

/** Checks the `transactions` option: a function, or absent. */
export function readRunner(value: unknown): TransactionRunner | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function')
    throw new InvalidArgumentError(
      'options.transactions',
      value,
      'must be a function that runs its argument in a transaction of your library, e.g. (fn) => sql.begin((tx) => fn(fromPostgresJs(tx), tx))',
    );
  return value as TransactionRunner;
}

/**
 * Starts a transaction through `runner` and returns once the library has opened it (its function was
 * called). Fails with the library's error when it could not open one.
 */
export async function host(runner: TransactionRunner, connection: Connection): Promise<Hosted> {
  let opened!: (value: { exec: SqlExecutor; handle: unknown }) => void;
  let finish!: (commit: boolean) => void;
  const open = new Promise<{ exec: SqlExecutor; handle: unknown }>((resolve) => {
    opened = resolve;
  });
  const ending = new Promise<boolean>((resolve) => {
    finish = resolve;
  });
  const rollback = new RollbackRequest('rolled back by duetime');
  // What the runner ended with: undefined when it committed, its error otherwise. Never rejects.
  const outcome = Promise.resolve()
    .then(() =>
      runner(async (exec, handle) => {
        opened({ exec, handle });
        if (!(await ending)) throw rollback;
      }),
    )
    .then(
      () => undefined,
      (error: unknown) => error ?? new Error(String(error)),
    );
  const started = await Promise.race([
    open,
    outcome.then((error) => {
      throw error === undefined
        ? new BackendError('begin transaction', 'options.transactions returned without running its function')
        : connection.error(error, 'begin transaction');
    }),
  ]);
  const { exec, handle } = started;
  if (typeof exec?.query !== 'function') {
    finish(false);
    await outcome;
    throw new InvalidArgumentError(
      'options.transactions',
      '(transaction runner)',
      'must call its function with an executor of the transaction (SqlExecutor: see @duetime/bindings) and the handle processors get',
    );
  }
  return {
    exec: {
      query: async (text, params, name) => {
        const result = await exec.query(text, [...(params ?? [])], name);
        return { rows: result.rows as never[], rowCount: result.rowCount ?? result.rows.length };
      },
    },
    handle,
    concurrent: exec.concurrent === true,
    async end(commit) {
      finish(commit);
      const error = await outcome;
      if (commit && error !== undefined) throw connection.error(error, 'commit');
      if (!commit && error !== undefined && error !== rollback) throw connection.error(error, 'roll back');
    },
  };
}
