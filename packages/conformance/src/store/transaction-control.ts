import { Dispatcher, DuetimeError, type Logger } from '@duetime/core';
import { expect, it } from 'vitest';
import { type SqlProbe, waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { effectMessage } from './fixtures.js';

const HOUR = 3_600_000;

/**
 * Statements that end or open a transaction, as applications and ORMs send them: every one must be refused
 * on the handle duetime gives out, whatever its case, leading whitespace or leading comments.
 */
export const TRANSACTION_CONTROL = [
  'BEGIN',
  'START TRANSACTION',
  'COMMIT',
  'END',
  'ROLLBACK',
  'ABORT',
  'begin transaction',
  '  Commit;',
  '\n\tcommit work',
  '/* a note */ COMMIT',
  '-- a note\nROLLBACK',
  'end transaction',
] as const;

/** Checks that `error` is duetime's typed refusal of `statement`. */
function expectRefused(error: unknown, statement: string): void {
  const what = `sending ${JSON.stringify(statement)} through tx.sql`;
  expect(error, `${what} must fail`).toBeDefined();
  expect(error, `${what} must fail with a DuetimeError`).toBeInstanceOf(DuetimeError);
  expect((error as DuetimeError).code, what).toMatch(/^DUETIME_[A-Z_]+$/);
  expect((error as DuetimeError).code, `${what}: not a conflict (that would be retried)`).not.toBe(
    'DUETIME_CONFLICT',
  );
}

/** The probe's `exec`, or a failure saying the probe needs one. */
function execOf(probe: SqlProbe): NonNullable<SqlProbe['exec']> {
  const exec = probe.exec;
  if (!exec)
    expect.fail(
      'a backend that declares `sql` needs `sql.exec(sql, text)` in its SqlProbe, to check that transaction control through tx.sql is refused',
    );
  return exec.bind(probe);
}

/** A logger that remembers warnings and errors. */
function recordingLogger(): Logger & { complaints: string[] } {
  const complaints: string[] = [];
  return {
    complaints,
    debug() {},
    info() {},
    warn: (m) => complaints.push(`warn: ${m}`),
    error: (m) => complaints.push(`error: ${m}`),
  };
}

/**
 * Transaction control through `tx.sql` (SQL backends): `BEGIN`, `COMMIT`, `ROLLBACK` and their kin would
 * end duetime's transaction under it — committing an application's row early in `store.transact`, or a
 * delivery batch in a processor. They are refused at that statement with a typed error, nothing commits
 * early, and what the store holds afterwards agrees with what was reported. Savepoints stay the way to
 * nest. Backends without `sql` give no handle at all.
 */
export function transactionControlTests({ harness, sql }: SuiteContext): void {
  const probe = sql;
  if (!probe) {
    it('gives no SQL handle on a backend without sql: tx.sql is undefined in transactions and processors', async () => {
      const backend = await harness().open();
      const { store } = backend;
      expect(harness().promised(backend).sql, 'a backend that declares sql needs a sql probe').toBe(false);
      expect(await store.transact((tx) => tx.sql)).toBeUndefined();
      await store.transact((tx) => tx.schedule('nosql/1', new Date(Date.now() - 1), effectMessage('nosql')));
      const handles: unknown[] = [];
      harness().run(
        new Dispatcher({ store, rescanInterval: 100, processor: async (tx) => void handles.push(tx.sql) }),
      );
      await waitFor('the delivery', () => handles.length === 1);
      expect(handles).toEqual([undefined]);
    });
    return;
  }

  it('refuses transaction control through tx.sql in store.transact with a typed error, committing nothing', async () => {
    const backend = await harness().open();
    const { store } = backend;
    await probe.setup(backend);
    const exec = execOf(probe);
    const at = new Date(Date.now() + HOUR);
    for (const [i, statement] of TRANSACTION_CONTROL.entries()) {
      const error = await store
        .transact(async (tx) => {
          await tx.schedule(`tc/transact/${i}`, at, effectMessage('tc'));
          await probe.write(tx.sql, `transact-${i}`);
          await exec(tx.sql, statement);
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expectRefused(error, statement);
    }
    expect(await probe.rows(backend)).toEqual([]);
    expect(await store.countSchedules()).toBe(0);
  });

  it('commits nothing early: a function that catches the refusal and then throws leaves no row and no schedule', async () => {
    const backend = await harness().open();
    const { store } = backend;
    await probe.setup(backend);
    const exec = execOf(probe);
    const boom = new Error('after the refused statement');
    for (const [i, statement] of TRANSACTION_CONTROL.entries()) {
      let refused: unknown;
      await expect(
        store.transact(async (tx) => {
          await probe.write(tx.sql, `early-${i}`);
          await tx.schedule(`tc/early/${i}`, new Date(Date.now() + HOUR), effectMessage('tc'));
          await exec(tx.sql, statement).catch((e: unknown) => {
            refused = e;
          });
          throw boom;
        }),
      ).rejects.toBe(boom);
      expectRefused(refused, statement);
    }
    expect(await probe.rows(backend)).toEqual([]);
    expect(await store.countSchedules()).toBe(0);
  });

  it('keeps the transaction whole after a caught refusal: the row and the schedule commit together', async () => {
    const backend = await harness().open();
    const { store } = backend;
    await probe.setup(backend);
    const exec = execOf(probe);
    let refused: unknown;
    const outcome = await store
      .transact(async (tx) => {
        await probe.write(tx.sql, 'kept-1');
        await exec(tx.sql, 'COMMIT').catch((e: unknown) => {
          refused = e;
        });
        await tx.schedule('tc/kept', new Date(Date.now() + HOUR), effectMessage('tc'));
        await probe.write(tx.sql, 'kept-2');
        return 'committed';
      })
      .catch((e: unknown) => e);
    expectRefused(refused, 'COMMIT');
    const rows = (await probe.rows(backend)).sort();
    const schedule = await store.loadSchedule('tc/kept');
    if (outcome === 'committed') {
      expect(rows).toEqual(['kept-1', 'kept-2']);
      expect(schedule).toBeDefined();
    } else {
      // A backend may also fail the whole transaction: then nothing of it committed.
      expect(outcome).toBeInstanceOf(DuetimeError);
      expect(rows).toEqual([]);
      expect(schedule).toBeUndefined();
    }
  });

  it('lets savepoints through tx.sql: a rolled-back savepoint undoes only its own rows', async () => {
    const backend = await harness().open();
    const { store } = backend;
    await probe.setup(backend);
    const exec = execOf(probe);
    await store.transact(async (tx) => {
      await probe.write(tx.sql, 'sp-kept');
      await exec(tx.sql, 'SAVEPOINT conformance_sp');
      await probe.write(tx.sql, 'sp-undone');
      await exec(tx.sql, 'ROLLBACK TO SAVEPOINT conformance_sp');
      await exec(tx.sql, 'RELEASE SAVEPOINT conformance_sp');
      await tx.schedule('tc/savepoint', new Date(Date.now() + HOUR), effectMessage('tc'));
    });
    expect(await probe.rows(backend)).toEqual(['sp-kept']);
    expect(await store.loadSchedule('tc/savepoint')).toBeDefined();
  });

  it('refuses transaction control through tx.sql in a processor: that part fails with the typed error, the batch commits the others, and the store agrees with the events', async () => {
    const backend = await harness().open();
    const { store } = backend;
    await probe.setup(backend);
    const exec = execOf(probe);
    const statements = new Map<string, string>(TRANSACTION_CONTROL.map((s, i) => [`tc/p/${i}`, s]));
    const plain = ['tc/p/ok-a', 'tc/p/ok-b'];
    await store.transact(async (tx) => {
      let n = 0;
      for (const key of [...statements.keys(), ...plain, 'tc/p/caught'])
        await tx.schedule(key, new Date(Date.now() - 1000 + n++), effectMessage('tc'));
    });
    const logger = recordingLogger();
    const failed = new Map<string, unknown>();
    const delivered: string[] = [];
    let caught: unknown;
    const dispatcher = new Dispatcher({
      store,
      logger,
      batchSize: 32,
      batchDuration: 600_000,
      retryDelay: HOUR,
      rescanInterval: 100,
      processor: async (tx, _message, { schedule }) => {
        await probe.write(tx.sql, schedule.key);
        const statement = statements.get(schedule.key);
        if (statement !== undefined) await exec(tx.sql, statement);
        if (schedule.key === 'tc/p/caught') {
          await exec(tx.sql, 'COMMIT').catch((e: unknown) => {
            caught = e;
          });
          await probe.write(tx.sql, 'tc/p/caught-after');
        }
      },
    });
    dispatcher.on('failed', (e) => void failed.set(e.schedule.key, e.error));
    dispatcher.on('delivered', (e) => void delivered.push(e.schedule.key));
    harness().run(dispatcher);
    const total = statements.size + plain.length + 1;
    await waitFor('every schedule to be delivered or to fail', () => failed.size + delivered.length >= total);
    const refusedKeys = [...failed.keys()].filter((key) => key !== 'tc/p/caught');
    expect(refusedKeys.sort()).toEqual([...statements.keys()].sort());
    for (const [key, statement] of statements) {
      expectRefused(failed.get(key), statement);
      const pending = await store.loadSchedule(key);
      expect(pending, `${key} stays pending after its refused ${JSON.stringify(statement)}`).toMatchObject({
        attempts: 1,
      });
      expect(pending!.lastError).toMatch(new RegExp(`^${(failed.get(key) as Error).name}: `));
      expect(pending!.dueAt.getTime()).toBeGreaterThan(Date.now() + HOUR / 2);
    }
    expectRefused(caught, 'COMMIT');
    // The part that caught its refusal either went on and committed whole, or failed whole.
    const caughtDelivered = delivered.includes('tc/p/caught');
    expect(delivered.sort()).toEqual([...plain, ...(caughtDelivered ? ['tc/p/caught'] : [])].sort());
    for (const key of delivered) expect(await store.loadSchedule(key), `${key} consumed`).toBeUndefined();
    if (!caughtDelivered) expect(await store.loadSchedule('tc/p/caught')).toMatchObject({ attempts: 1 });
    // Exactly the delivered parts' rows committed: none of a refused part's.
    expect((await probe.rows(backend)).sort()).toEqual(
      [...plain, ...(caughtDelivered ? ['tc/p/caught', 'tc/p/caught-after'] : [])].sort(),
    );
    expect(
      logger.complaints.filter((c) => /batch failed|ended the delivery|stay pending/.test(c)),
      'nothing logged that contradicts the store',
    ).toEqual([]);
  });
}
