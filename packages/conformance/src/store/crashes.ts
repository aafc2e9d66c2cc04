import { Dispatcher, type Processor } from '@duetime/core';
import { expect, it } from 'vitest';
import type { WorkerProcess } from '../child-process.js';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { appliedCount, effectMessage, effects } from './fixtures.js';

/** What the `dispatch` role's processor records with each effect (see roles/store.ts). */
interface Seen {
  key: string;
  attempts: number;
  lastError: string | null;
}

const INTERRUPTED = /^DeliveryInterruptedError: /;

/**
 * Crash counting: a delivery whose process dies counts as an attempt of every schedule it held, recorded
 * by the next claim, and a message that kills its process every time ends in the dead letters instead of
 * stopping the queue. With real processes for backends that declare `multiProcess`; every backend checks
 * that a delivery that ends without a crash is never counted as one.
 */
export function crashTests({ harness, capabilities }: SuiteContext): void {
  it('never counts a delivery that ended without a crash (a drain mid-batch) as an attempt', async () => {
    const { store } = await harness().open();
    await store.transact(async (tx) => {
      for (let i = 0; i < 8; i++)
        await tx.schedule(`calm/${i}`, new Date(Date.now() - 1000 + i), effectMessage(`calm-${i}`));
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const seen: Seen[] = [];
    const failures: string[] = [];
    const record: Processor = async (tx, message, { schedule }) => {
      seen.push({ key: schedule.key, attempts: schedule.attempts, lastError: schedule.lastError ?? null });
      await tx.exec(effects, message.aggregateId!, (_s, ag) => ag.raise('effect.applied'));
    };
    const first = new Dispatcher({
      store,
      batchSize: 8,
      batchDuration: 600_000,
      retryDelay: 10,
      processor: async (tx, message, context) => {
        await record(tx, message, context);
        if (context.schedule.key === 'calm/2') {
          entered();
          await gate;
        }
      },
    });
    first.on('failed', (e) => void failures.push(e.schedule.key));
    const running = first.run();
    harness().defer(() => first.drain());
    await inside;
    const draining = first.drain();
    release();
    await draining;
    await running;
    // Three ran and committed; the five it never started went back as they were.
    const left = await store.listSchedules();
    expect(left.map((s) => s.key)).toEqual(['calm/3', 'calm/4', 'calm/5', 'calm/6', 'calm/7']);
    for (const s of left)
      expect({ key: s.key, attempts: s.attempts, lastError: s.lastError }).toEqual({
        key: s.key,
        attempts: 0,
        lastError: undefined,
      });
    const second = new Dispatcher({ store, retryDelay: 10, processor: record });
    second.on('failed', (e) => void failures.push(e.schedule.key));
    harness().run(second);
    await waitFor('the rest to be delivered', async () => (await store.listSchedules()).length === 0);
    expect(failures).toEqual([]);
    expect(seen.every((s) => s.attempts === 0 && s.lastError === null)).toBe(true);
    for (let i = 0; i < 8; i++) expect(await appliedCount(store, `calm-${i}`)).toBe(1);
  });

  if (!capabilities.multiProcess) return;

  for (const pipeline of [false, true])
    it(`counts a delivery SIGKILLed mid-batch as one attempt of each schedule it held, and still delivers every effect once${pipeline ? ' (pipeline: true)' : ''}`, async () => {
      const { store, namespace } = await harness().open();
      const count = 6;
      await store.transact(async (tx) => {
        for (let i = 0; i < count; i++)
          await tx.schedule(`count/${i}`, new Date(Date.now() - 1000 + i), effectMessage(`count-${i}`));
      });
      const before = new Map((await store.listSchedules()).map((s) => [s.key, s.version]));
      // Pipelined, the batch's processors run at once: the others have written when the fourth hangs.
      const victim = harness().spawn('dispatch', namespace, { hangAt: 4, batchSize: 10, pipeline });
      await victim.line(/^IN_PROCESSOR /);
      await victim.kill();
      // The kill itself changes nothing a reader sees: the batch never committed.
      const after = await store.listSchedules();
      expect(new Map(after.map((s) => [s.key, s.version]))).toEqual(before);
      expect(after.every((s) => s.attempts === 0 && s.lastError === undefined)).toBe(true);

      const survivor = harness().spawn('dispatch', namespace, { batchSize: 10, events: true, pipeline });
      await survivor.line(/^READY$/);
      await waitFor(
        'every schedule to be delivered again',
        async () => (await store.listSchedules()).length === 0,
        {
          timeoutMs: 60_000,
        },
      );
      const failedLines = () => survivor.lines.filter((l) => l.startsWith('FAILED '));
      await waitFor('the survivor to report each crash', () => failedLines().length >= count);
      expect(await survivor.stop()).toBe(0);
      for (let i = 0; i < count; i++) {
        const events = (await store.loadEvents(`count-${i}`)).filter((e) => e.type === 'effect.applied');
        expect(events, `effects of count/${i}`).toHaveLength(1);
        // The processor that committed saw the crash recorded: one failed attempt, its error saying so.
        const seen = events[0]!.data as Seen;
        expect(seen.attempts, `attempts of count/${i} when delivered`).toBe(1);
        expect(seen.lastError, `last error of count/${i} when delivered`).toMatch(INTERRUPTED);
      }
      // The survivor reported each crash as a failed attempt, once, and nothing else failed.
      expect(failedLines().sort()).toEqual(
        Array.from({ length: count }, (_, i) => `FAILED count/${i} 1 DeliveryInterruptedError`).sort(),
      );
    }, 120_000);

  it('dead-letters a message that SIGKILLs its process every time after maxAttempts crashes; the 199 claimed with it commit once each', async () => {
    const { store, namespace } = await harness().open();
    const count = 200;
    const batchSize = 200;
    const maxAttempts = 3;
    const poison = 'poison/150';
    const base = Date.now() - 60_000;
    await store.transact(async (tx) => {
      for (let i = 0; i < count; i++)
        await tx.schedule(
          `poison/${String(i).padStart(3, '0')}`,
          new Date(base + i),
          effectMessage(`poison-${i}`),
        );
    });
    // The bound of issue 29: the crashes themselves, plus what finding the culprit in a batch may take.
    const bound = maxAttempts + Math.ceil(Math.log2(batchSize)) + 2;
    const args = { batchSize, maxAttempts, retryDelay: 20, poison, events: true };
    let restarts = 0;
    const workers: WorkerProcess[] = [];
    for (;;) {
      const worker = harness().spawn('dispatch', namespace, args);
      workers.push(worker);
      await waitFor(
        `dispatcher process ${workers.length} to die or to deliver everything`,
        async () => !worker.alive() || (await store.countSchedules({ prefix: 'poison/' })) === 0,
        { timeoutMs: 90_000, intervalMs: 50 },
      );
      if (worker.alive()) {
        // The process that found the last crash dead-lettered the poison, and says so.
        await worker.line(/^DEAD /, 30_000);
        expect(await worker.stop()).toBe(0);
        break;
      }
      await worker.exited;
      expect(worker.child.signalCode, `dispatcher process ${workers.length}: ${worker.stderr()}`).toBe(
        'SIGKILL',
      );
      restarts++;
      expect(restarts, 'restarts needed').toBeLessThanOrEqual(bound);
    }
    const dead = workers.flatMap((w) => w.lines.filter((l) => l.startsWith('DEAD ')));
    // Every run of the poison message was a crash, and each crash was counted once: the n-th run saw
    // n - 1 failed attempts.
    const runs = workers.flatMap((w) => w.lines.filter((l) => l.startsWith('POISONED ')));
    const trace = workers
      .map((w, i) => {
        const said = [...w.lines, ...w.stderr().split('\n')].filter(
          (l) => l.includes(poison) || l.includes('ahead of the'),
        );
        return `process ${i + 1}: ${said.join(' | ')}`;
      })
      .join('\n');
    expect(runs, `the poison's runs, by process:\n${trace}`).toEqual(
      Array.from({ length: maxAttempts }, (_, n) => `POISONED ${poison} ${n}`),
    );
    expect(restarts).toBe(maxAttempts);
    const letter = await store.loadDeadLetter(poison);
    expect(letter, 'the poison message in the dead letters').toBeDefined();
    expect(letter!.attempts).toBe(maxAttempts);
    expect(letter!.error).toMatch(INTERRUPTED);
    expect(dead).toEqual([`DEAD ${poison} ${maxAttempts} DeliveryInterruptedError`]);
    expect(await store.countDeadLetters()).toBe(1);
    for (let i = 0; i < count; i++)
      expect(await appliedCount(store, `poison-${i}`), `effects of poison/${i}`).toBe(i === 150 ? 0 : 1);
  }, 300_000);
}
