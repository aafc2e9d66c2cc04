import { intervalFrom, recurring } from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage } from './fixtures.js';

/** Crashes: a dispatcher process killed inside a processor loses nothing and commits nothing twice. */
export function processTests({ harness }: SuiteContext): void {
  it('redelivers a message whose dispatcher was SIGKILLed inside the processor, and commits its effect once', async () => {
    const { store, namespace } = await harness().open();
    await store.transact(async (tx) => {
      await tx.schedule('crash/1', new Date(Date.now() - 1), effectMessage('crash-1'));
      await tx.schedule('crash/2', new Date(Date.now() - 1), effectMessage('crash-2'));
    });
    const versions = new Map<string, number | undefined>();
    for (const key of ['crash/1', 'crash/2']) versions.set(key, (await store.loadSchedule(key))?.version);
    const victim = harness().spawn('dispatch', namespace, { hang: true });
    const line = await victim.line(/^IN_PROCESSOR /);
    await victim.kill();
    const stuckKey = line.slice('IN_PROCESSOR '.length);
    expect(['crash/1', 'crash/2']).toContain(stuckKey);
    // The killed transaction never committed: the schedule is still there at its version (versions come
    // from a store-wide counter, and the dispatcher may take either key first), the effect is not.
    expect((await store.loadSchedule(stuckKey))?.version).toBe(versions.get(stuckKey));
    const survivor = harness().spawn('dispatch', namespace);
    await survivor.line(/^READY$/);
    await waitFor('both messages to be delivered', async () => (await store.listSchedules()).length === 0);
    expect(await survivor.stop()).toBe(0);
    expect(await appliedCount(store, 'crash-1')).toBe(1);
    expect(await appliedCount(store, 'crash-2')).toBe(1);
  }, 90_000);

  it('redelivers a whole batch whose dispatcher was SIGKILLed in its middle, each effect committed once', async () => {
    const { store, namespace } = await harness().open();
    await store.transact(async (tx) => {
      for (let i = 0; i < 6; i++)
        await tx.schedule(`mid/${i}`, new Date(Date.now() - 1000 + i), effectMessage(`mid-${i}`));
    });
    const before = new Map((await store.listSchedules()).map((s) => [s.key, s.version]));
    const victim = harness().spawn('dispatch', namespace, { hangAt: 4, batchSize: 10 });
    await victim.line(/^IN_PROCESSOR /);
    await victim.kill();
    // Three processors had finished inside the batch; its commit never came, so nothing of it happened.
    const after = await store.listSchedules();
    expect(new Map(after.map((s) => [s.key, s.version]))).toEqual(before);
    expect(after.every((s) => s.attempts === 0)).toBe(true);
    for (let i = 0; i < 6; i++) expect(await appliedCount(store, `mid-${i}`)).toBe(0);
    const survivor = harness().spawn('dispatch', namespace, { batchSize: 10 });
    await survivor.line(/^READY$/);
    await waitFor('the batch to be delivered again', async () => (await store.listSchedules()).length === 0);
    expect(await survivor.stop()).toBe(0);
    for (let i = 0; i < 6; i++) expect(await appliedCount(store, `mid-${i}`)).toBe(1);
  }, 90_000);

  it('redelivers a recurring occurrence whose dispatcher was SIGKILLed, once, and arms the next one once', async () => {
    const { store, namespace } = await harness().open();
    const first = Date.now() + 300;
    await store.transact((tx) =>
      tx.schedule(
        'every/hour',
        recurring(intervalFrom(3_600_000, new Date(first)), { startAt: new Date(first) }),
        effectMessage('every-hour'),
      ),
    );
    const before = (await store.loadSchedule('every/hour'))!;
    expect(before.at.getTime()).toBe(first);
    const victim = harness().spawn('dispatch', namespace, { hang: true });
    await victim.line(/^IN_PROCESSOR every\/hour$/);
    await victim.kill();
    // Killed between the occurrence's consumption and the next one's arming (one commit): neither happened.
    expect(await store.loadSchedule('every/hour')).toMatchObject({ version: before.version, at: before.at });
    expect(await appliedCount(store, 'every-hour')).toBe(0);
    const survivor = harness().spawn('dispatch', namespace);
    await survivor.line(/^READY$/);
    await waitFor('the next occurrence to be armed', async () => {
      const s = await store.loadSchedule('every/hour');
      return s !== undefined && s.at.getTime() === first + 3_600_000;
    });
    expect(await survivor.stop()).toBe(0);
    expect(await appliedCount(store, 'every-hour')).toBe(1);
    const next = (await store.loadSchedule('every/hour'))!;
    expect(next.version).toBeGreaterThan(before.version);
    expect(next.recurrence?.count).toBe(1);
  }, 90_000);

  it('shares work between dispatcher processes, each effect committed once', async () => {
    const { store, namespace } = await harness().open();
    const count = 200;
    await store.transact(async (tx) => {
      for (let i = 0; i < count; i++)
        await tx.schedule(
          `procs/${i}`,
          new Date(Date.now() - count + i),
          effectMessage(`procs-${i % 20}`, { i }),
        );
    });
    const workers = [
      harness().spawn('dispatch', namespace, { concurrency: 4 }),
      harness().spawn('dispatch', namespace, { concurrency: 4 }),
    ];
    await Promise.all(workers.map((w) => w.line(/^READY$/)));
    await waitFor('all messages to be consumed', async () => (await store.listSchedules()).length === 0, {
      timeoutMs: 60_000,
    });
    for (const w of workers) expect(await w.stop()).toBe(0);
    let total = 0;
    for (let a = 0; a < 20; a++) total += await appliedCount(store, `procs-${a}`);
    expect(total).toBe(count);
  }, 90_000);
}
