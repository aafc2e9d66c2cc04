import { InvalidArgumentError, intervalFrom, recurring, type SqlExecutor } from '@duetime/core';
import { expect, it } from 'vitest';
import { dispatchUntil, keysIn, scheduledUnder } from './server.js';
import type { GroupContext } from './types.js';

const HOUR = 3_600_000;
const expire = (id: string) => ({ type: 'order.expire', aggregateId: id });

type Run = <T>(fn: (executor: SqlExecutor, handle: unknown) => Promise<T>) => Promise<T>;

/**
 * The executor contract on the library's transaction: statements with parameters, rows and counts, `$`
 * that is not a parameter, rollback and savepoints, and the refusal of what is not an open transaction.
 */
export function executorTests({ target, server }: GroupContext): void {
  const transaction: Run = (fn) => target.transaction!(server.library, fn);
  const orders = () => `"${server.schema}".orders`;

  it('runs statements with parameters inside the library’s transaction: rows, counts and repeated parameters', async () => {
    const p = 'rows/';
    const result = await transaction(async (executor) => {
      const inserted = await executor.query(
        `INSERT INTO ${orders()} (id, n) VALUES ($1, $2), ($3, $2) RETURNING id, n`,
        [`${p}a`, 7, `${p}b`],
      );
      const updated = await executor.query(`UPDATE ${orders()} SET n = n + 1 WHERE id LIKE $1`, [`${p}%`]);
      const selected = await executor.query(
        `SELECT count(*)::int AS c, $1::text AS echo FROM ${orders()} WHERE id LIKE $1`,
        [`${p}%`],
      );
      return { inserted, updated, selected };
    });
    expect(result.inserted.rowCount).toBe(2);
    expect(result.inserted.rows.map((r) => [r.id, r.n])).toEqual([
      [`${p}a`, 7],
      [`${p}b`, 7],
    ]);
    expect(result.updated.rowCount).toBe(2);
    expect(result.selected.rows).toEqual([{ c: 2, echo: `${p}%` }]);
    expect(await keysIn(server, 'orders', p)).toEqual([`${p}a`, `${p}b`]);
  });

  it('passes dollar signs that are not parameters through unchanged ($$-quoted text, $name)', async () => {
    const result = await transaction((executor) =>
      executor.query(`SELECT $1::text AS p, '$$ $name a$b' AS s, $$it's$$ AS q, $tag$x$tag$ AS t`, ['v']),
    );
    expect(result.rows).toEqual([{ p: 'v', s: '$$ $name a$b', q: "it's", t: 'x' }]);
  });

  it('rolls back with the library: what went through the executor is gone, savepoints nest', async () => {
    const p = 'savepoints/';
    const failure = new Error('the application changed its mind');
    await expect(
      transaction(async (executor) => {
        await executor.query(`INSERT INTO ${orders()} (id, n) VALUES ($1, 1)`, [`${p}rolled`]);
        throw failure;
      }),
    ).rejects.toBe(failure);
    await transaction(async (executor) => {
      await executor.query('SAVEPOINT inner_part', []);
      await executor.query(`INSERT INTO ${orders()} (id, n) VALUES ($1, 1)`, [`${p}undone`]);
      await executor.query('ROLLBACK TO SAVEPOINT inner_part', []);
      await executor.query('RELEASE SAVEPOINT inner_part', []);
      await executor.query(`INSERT INTO ${orders()} (id, n) VALUES ($1, 1)`, [`${p}kept`]);
    });
    expect(await keysIn(server, 'orders', p)).toEqual([`${p}kept`]);
  });

  if (target.notTransactions && target.bind)
    it('refuses a handle that is not an open transaction with an InvalidArgumentError naming handle', async () => {
      for (const handle of await target.notTransactions!(server.library)) {
        let error: unknown;
        try {
          target.bind!(handle);
        } catch (e) {
          error = e;
        }
        expect(error, `binding ${String(handle)}`).toBeInstanceOf(InvalidArgumentError);
        expect((error as InvalidArgumentError).message).toMatch(/handle/);
      }
    });
}

/**
 * `store.join` inside the library's transaction: commit, every way of rolling back, a failed statement,
 * cancel and replace, and recurring schedules armed through the binding.
 */
export function joinTests({ target, server, options }: GroupContext): void {
  const transaction: Run = (fn) => target.transaction!(server.library, fn);
  const store = () => server.backend.store;
  const insert = (executor: SqlExecutor, id: string) =>
    executor.query(`INSERT INTO "${server.schema}".orders (id) VALUES ($1)`, [id]);
  const orders = (prefix: string) => keysIn(server, 'orders', prefix);
  const scheduled = (prefix: string) => scheduledUnder(server, prefix);

  it('commits the schedule with the application’s own row, not before, and a dispatcher delivers it', async () => {
    const p = 'commit/';
    await transaction(async (executor) => {
      await insert(executor, `${p}1`);
      await store().join(executor, async (tx) => {
        await tx.schedule(`${p}1/expire`, new Date(Date.now() - 1), expire(`${p}1`));
        expect(await tx.loadSchedule(`${p}1/expire`)).toBeDefined();
      });
      // Not visible outside the application's transaction before its commit (PGlite has one session:
      // a read from outside would wait for this transaction to end).
      if (!options.pglite) {
        expect(await scheduled(p)).toEqual([]);
        expect(await orders(p)).toEqual([]);
      }
    });
    expect(await orders(p)).toEqual([`${p}1`]);
    expect(await scheduled(p)).toEqual([`${p}1/expire`]);
    const seen: string[] = [];
    await dispatchUntil(
      server.backend,
      {
        processor: async (_tx, _message, { schedule }) => {
          if (schedule.key.startsWith(p)) seen.push(schedule.key);
        },
      },
      async () => seen.length > 0 && (await scheduled(p)).length === 0,
    );
    expect(seen).toEqual([`${p}1/expire`]);
  });

  it('tells its transaction state truly when it tells it, and a one-schedule join commits', async () => {
    const p = 'tells/';
    let kept: SqlExecutor | undefined;
    let told: boolean | undefined;
    await transaction(async (executor) => {
      kept = executor;
      told = executor.inTransaction?.();
      // An executor that answers must answer true inside its transaction (else the store refuses it).
      expect([true, undefined]).toContain(told);
      await insert(executor, `${p}1`);
      await store().join(executor, (tx) =>
        tx.schedule(`${p}1/expire`, new Date(Date.now() + HOUR), expire(`${p}1`)),
      );
    });
    expect(await orders(p)).toEqual([`${p}1`]);
    expect(await scheduled(p)).toEqual([`${p}1/expire`]);
    // Once the transaction ended, one that tells says so (the store then refuses the handle).
    if (told) expect(kept?.inTransaction?.()).toBe(false);
  });

  it('discards the schedule when the application throws, and undoes only duetime’s writes when its function throws', async () => {
    const p = 'thrown/';
    await expect(
      transaction(async (executor) => {
        await insert(executor, `${p}1`);
        await store().join(executor, (tx) =>
          tx.schedule(`${p}1/expire`, new Date(Date.now() + HOUR), expire(`${p}1`)),
        );
        throw new Error('payment refused');
      }),
    ).rejects.toThrow('payment refused');
    expect(await orders(`${p}1`)).toEqual([]);
    expect(await scheduled(`${p}1/`)).toEqual([]);

    await transaction(async (executor) => {
      await insert(executor, `${p}2`);
      await expect(
        store().join(executor, async (tx) => {
          await tx.schedule(`${p}2/expire`, new Date(Date.now() + HOUR), expire(`${p}2`));
          throw new Error('not this one');
        }),
      ).rejects.toThrow('not this one');
      // The application's transaction goes on.
      await store().join(executor, (tx) =>
        tx.schedule(`${p}2/remind`, new Date(Date.now() + HOUR), expire(`${p}2`)),
      );
    });
    expect(await orders(`${p}2`)).toEqual([`${p}2`]);
    expect(await scheduled(`${p}2/`)).toEqual([`${p}2/remind`]);
  });

  if (target.rollback)
    it('discards the schedule when the application rolls back with the library’s own rollback', async () => {
      const p = 'rollback/';
      await target.rollback!(server.library, async (executor) => {
        await insert(executor, `${p}1`);
        await store().join(executor, (tx) =>
          tx.schedule(`${p}1/expire`, new Date(Date.now() - 1), expire(`${p}1`)),
        );
        expect(await store().join(executor, (tx) => tx.loadSchedule(`${p}1/expire`))).toBeDefined();
      });
      expect(await orders(p)).toEqual([]);
      expect(await scheduled(p)).toEqual([]);
    });

  it('commits nothing when a statement of the application fails, caught or not', async () => {
    const p = 'failed/';
    const fail = (executor: SqlExecutor, handle: unknown) =>
      target.failStatement
        ? target.failStatement(server.library, handle)
        : executor.query('SELECT 1/0 AS never', []);
    // Not caught: the library rolls back and rejects with the statement's error.
    await expect(
      transaction(async (executor, handle) => {
        await insert(executor, `${p}1`);
        await store().join(executor, (tx) =>
          tx.schedule(`${p}1/expire`, new Date(Date.now() - 1), expire(`${p}1`)),
        );
        await fail(executor, handle);
      }),
    ).rejects.toBeInstanceOf(Error);
    // Caught: the transaction is aborted; a later join fails, and the commit commits nothing (whether the
    // library reports it or not).
    const later: unknown[] = [];
    await transaction(async (executor, handle) => {
      await insert(executor, `${p}2`);
      await store().join(executor, (tx) =>
        tx.schedule(`${p}2/expire`, new Date(Date.now() - 1), expire(`${p}2`)),
      );
      later.push(
        await fail(executor, handle).then(
          () => 'no error',
          (error: unknown) => error,
        ),
      );
      later.push(
        await store()
          .join(executor, (tx) => tx.schedule(`${p}2/remind`, new Date(Date.now() - 1), expire(`${p}2`)))
          .then(
            () => 'no error',
            (error: unknown) => error,
          ),
      );
    }).catch(() => {});
    expect(later[0]).toBeInstanceOf(Error);
    expect(later[1]).toBeInstanceOf(Error);
    expect(await orders(p)).toEqual([]);
    expect(await scheduled(p)).toEqual([]);
  });

  it('cancels and replaces inside the application’s transaction, by key and by prefix', async () => {
    const p = 'replace/';
    await store().transact(async (tx) => {
      for (const k of ['a', 'b', 'c']) await tx.schedule(`${p}${k}`, new Date(Date.now() + HOUR), expire(k));
    });
    await transaction((executor) =>
      store().join(executor, async (tx) => {
        expect(await tx.cancelSchedule(`${p}a`)).toBe(true);
        await tx.schedule(`${p}b`, new Date(Date.now() + 2 * HOUR), expire('b2'));
        expect(await tx.cancelSchedulePrefix(`${p}c`)).toBe(1);
      }),
    );
    const left = (await store().pageSchedules({ prefix: p })).items;
    expect(left.map((s) => [s.key, s.message.aggregateId])).toEqual([[`${p}b`, 'b2']]);
  });

  it('arms a recurring schedule through the binding: delivered at each occurrence, discarded by a rollback', async () => {
    const p = 'recurring/';
    const spec = () => recurring(intervalFrom(50, new Date(Date.now())));
    await expect(
      transaction(async (executor) => {
        await insert(executor, `${p}gone`);
        await store().join(executor, (tx) => tx.schedule(`${p}gone`, spec(), expire(`${p}gone`)));
        throw new Error('not armed');
      }),
    ).rejects.toThrow('not armed');
    expect(await scheduled(p)).toEqual([]);

    await transaction(async (executor) => {
      await insert(executor, `${p}1`);
      await store().join(executor, (tx) => tx.schedule(`${p}tick`, spec(), expire(`${p}1`)));
    });
    const armed = await store().loadSchedule(`${p}tick`);
    expect(armed?.recurrence).toBeDefined();
    const runs: { number: number; at: number; version: number }[] = [];
    await dispatchUntil(
      server.backend,
      {
        processor: async (_tx, _message, { schedule, occurrence }) => {
          if (schedule.key === `${p}tick`)
            runs.push({
              number: occurrence!.number,
              at: occurrence!.at.getTime(),
              version: schedule.version,
            });
        },
      },
      () => runs.length >= 2,
    );
    // Each occurrence is a new version, the next one armed with the previous one's consumption.
    expect(runs[0]!.number).toBe(1);
    expect(runs[1]!.number).toBe(2);
    expect(runs[1]!.at).toBeGreaterThan(runs[0]!.at);
    expect(runs[1]!.version).toBeGreaterThan(runs[0]!.version);
    expect(await scheduled(p)).toEqual([`${p}tick`]);
    // And cancelled through the binding.
    await transaction((executor) => store().join(executor, (tx) => tx.cancelSchedule(`${p}tick`)));
    expect(await scheduled(p)).toEqual([]);
  });
}
