import { InvalidArgumentError } from '@duetime/core';
import { expect, it } from 'vitest';
import { dispatchUntil, keysIn } from './server.js';
import type { GroupContext } from './types.js';

/**
 * Processors writing through the library on the delivery transaction's client: their writes commit with
 * the consumption, a throwing one rolls back only its own and is retried, the library's own transactions
 * stay inside the delivery, and anything but the delivery's client is refused.
 */
export function processorTests({ target, server, options }: GroupContext): void {
  const write = (sql: unknown, key: string) => target.write!(server.library, sql, key);
  const effects = (prefix: string) => keysIn(server, 'effects', prefix);
  const count = (prefix: string) => server.backend.store.countSchedules({ prefix });
  const due = (keys: string[]) =>
    server.backend.store.transact(async (tx) => {
      for (const key of keys) await tx.schedule(key, new Date(Date.now() - 1000), { type: 'effect' });
    });

  it('commits each processor’s writes with the consumption; a throwing one rolls back only its own, and is retried', async () => {
    const p = 'batch/';
    await due(['a', 'b', 'c'].map((k) => `${p}${k}`));
    const attempts: string[] = [];
    const seenOutside: string[] = [];
    const failed: string[] = [];
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
          await write(tx.sql, schedule.key);
          // Written in the delivery's transaction: nothing of it is visible outside before its commit (not
          // asked on PGlite, whose one session would make the read wait for this transaction).
          if (!options.pglite) seenOutside.push(...(await effects(schedule.key)));
          if (schedule.key.endsWith('/b') && attempts.filter((k) => k === schedule.key).length === 1)
            throw new Error('the first attempt fails after writing');
        },
      },
      async () => (await count(p)) === 0,
      { failed },
    );
    expect(seenOutside).toEqual([]);
    expect(failed).toEqual([`${p}b Error`]);
    expect(attempts.sort()).toEqual([`${p}a`, `${p}b`, `${p}b`, `${p}c`]);
    expect(await effects(p)).toEqual(['a', 'b', 'c'].map((k) => `${p}${k}`));
  });

  it('pipeline: true: the batch’s writes commit once; a throwing processor’s are undone and its failure alone recorded', async () => {
    const p = 'pipe/';
    await due(['a', 'b', 'c', 'd'].map((k) => `${p}${k}`));
    // Processors run at once where the delivery's transaction takes statements sent without waiting:
    // a library transaction whose executor says so (postgres.js, for one); duetime's own pool here
    // does not pipeline.
    const runner = target.transactions?.(server.library);
    const together = runner ? await runner(async (exec) => exec.concurrent === true) : false;
    const runs = new Map<string, number>();
    let running = 0;
    let most = 0;
    const failed: string[] = [];
    await dispatchUntil(
      server.backend,
      {
        batchSize: 10,
        batchDuration: 60_000,
        retryDelay: 3_600_000,
        pipeline: true,
        processor: async (tx, _message, { schedule }) => {
          if (!schedule.key.startsWith(p)) return;
          runs.set(schedule.key, (runs.get(schedule.key) ?? 0) + 1);
          running++;
          most = Math.max(most, running);
          try {
            await write(tx.sql, schedule.key);
          } finally {
            running--;
          }
          if (schedule.key === `${p}c`) throw new Error('after writing');
        },
      },
      async () => failed.length > 0 && (await count(p)) === 1,
      { failed },
    );
    expect(failed).toEqual([`${p}c Error`]);
    expect(await effects(p)).toEqual(['a', 'b', 'd'].map((k) => `${p}${k}`));
    expect(most > 1, 'processors ran at once').toBe(together);
    // Together: each ran in the group, then again one by one after c's failure undid the group.
    for (const k of ['a', 'b', 'c', 'd']) expect(runs.get(`${p}${k}`), `runs of ${k}`).toBe(together ? 2 : 1);
  });

  const nested = target.nested;
  if (nested)
    it('keeps the library’s own transactions inside the delivery: refused, or nested as a savepoint', async () => {
      const p = 'nested/';
      await due([`${p}x`]);
      const outcomes: unknown[] = [];
      const failure = new Error('the nested part fails');
      await dispatchUntil(
        server.backend,
        {
          maxAttempts: 1,
          processor: async (tx, _message, { schedule }) => {
            if (!schedule.key.startsWith(p)) return;
            await write(tx.sql, `${p}outer`);
            const attempt =
              'refused' in nested
                ? nested.refused(server.library, tx.sql)
                : nested.savepoint(server.library, tx.sql, `${p}inner`, failure);
            outcomes.push(
              await attempt.then(
                () => 'no error',
                (error: unknown) => error,
              ),
            );
          },
        },
        async () => outcomes.length > 0 && (await count(p)) === 0,
      );
      expect(outcomes).toHaveLength(1);
      if ('refused' in nested) {
        // Libraries wrap the driver's error in their own (`cause`).
        const chain: unknown[] = [];
        for (let e = outcomes[0]; e && chain.length < 5; e = (e as { cause?: unknown }).cause) chain.push(e);
        const refusal = chain.find((e) => e instanceof InvalidArgumentError);
        expect(refusal, String(outcomes[0])).toBeInstanceOf(InvalidArgumentError);
        expect((refusal as Error).message).toContain('tx.sql');
      } else expect(outcomes[0]).toBe(failure);
      // The processor's own write commits with the delivery; the nested part's does not.
      expect(await effects(p)).toEqual([`${p}outer`]);
    });

  if (target.bindDelivery)
    it('refuses a handle that is not the delivery’s client (a pool too) with an InvalidArgumentError naming it', async () => {
      for (const handle of [null, {}, 'tx.sql', server.pool]) {
        let error: unknown;
        try {
          target.bindDelivery!(server.library, handle);
        } catch (e) {
          error = e;
        }
        expect(error, `binding ${String(handle)}`).toBeInstanceOf(InvalidArgumentError);
        expect((error as InvalidArgumentError).message).toContain('handle');
      }
    });
}
