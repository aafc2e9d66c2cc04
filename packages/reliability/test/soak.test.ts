import { freshNamespace, waitFor } from '@duetime/conformance';
import { aggregate, type Backend, Dispatcher } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { createEffectTable, effectRows, recordDelivery } from '../src/effects.js';
import { FULL, SIZES, selectedBackends } from '../src/mode.js';
import { excess, handleCounts, MB, processListeners, type ResourceSample, sample } from '../src/resources.js';
import { recordResult } from '../src/results.js';
import { assertServiceUp, BACKENDS, dropTarget, hasSql, newTarget, openTarget } from '../src/targets.js';

const BATCH = 250;
/** Schedules scheduled but not yet delivered, at most (the producer waits for the dispatcher). */
const IN_FLIGHT = 2000;
const SAMPLES = 10;
/** The soak stops at its target or at this time limit, whichever comes first. */
const TIME_LIMIT_MS = FULL ? 60 * 60_000 : 60_000;

const marks = aggregate({ type: 'reliability-soak', initial: 0, apply: { delivered: (n: number) => n + 1 } });

describe.each(selectedBackends(BACKENDS))('soak on %s', (kind) => {
  const target = kind === 'sqlite' ? SIZES.soakSqlite : SIZES.soakOthers;
  it(`passes up to ${target} schedules through a dispatcher with flat memory and handles, and leaves nothing open after close()`, async () => {
    await assertServiceUp(kind);
    const handlesBefore = handleCounts();
    const listenersBefore = processListeners();
    // On SQLite the soak measures resources, not fsync: `normal` still loses nothing on a process crash.
    const fresh = newTarget(kind, freshNamespace());
    const spec = fresh.kind === 'sqlite' ? { ...fresh, synchronous: 'normal' as const } : fresh;
    const backend: Backend = await openTarget(spec);
    const samples: ResourceSample[] = [];
    let produced = 0;
    let delivered = 0;
    const started = Date.now();
    try {
      await createEffectTable(backend.store, spec);
      const dispatcher = new Dispatcher({
        store: backend.store,
        concurrency: 8,
        batchSize: 128,
        rescanInterval: 200,
        retryDelay: 20,
        // The effect: a row on SQL backends (counted distinct at the end), else an event per key.
        processor: async (tx, message, context) => {
          if (hasSql(spec)) await recordDelivery(tx, message, context.schedule, spec);
          else
            await tx.exec(marks, message.aggregateId ?? context.schedule.key, (_n, ag) =>
              ag.raise('delivered'),
            );
        },
      });
      const running = dispatcher.run();
      const every = Math.max(BATCH, Math.floor(target / SAMPLES / BATCH) * BATCH);
      let nextSample = every;
      while (produced < target && Date.now() - started < TIME_LIMIT_MS) {
        await waitFor(
          'the dispatcher to catch up with the producer',
          () => produced - dispatcher.snapshot().delivered < IN_FLIGHT,
          { timeoutMs: 120_000, intervalMs: 5 },
        );
        const from = produced;
        await backend.store.transact(async (tx) => {
          for (let i = from; i < from + BATCH; i++)
            await tx.schedule(`soak/${i}`, new Date(Date.now() - 1), {
              type: 'soak',
              aggregateId: `soak/${i}`,
              data: { put: `p${i}` },
            });
        });
        produced += BATCH;
        if (produced >= nextSample) {
          // Sampled when the dispatcher has caught up: what stays open then is what would pile up, not the
          // timers and requests of deliveries in flight at that instant.
          await waitFor(
            'the dispatcher to catch up before a sample',
            () => dispatcher.snapshot().delivered >= produced,
            {
              timeoutMs: 120_000,
              intervalMs: 5,
            },
          );
          samples.push(sample(produced));
          nextSample += every;
        }
      }
      await waitFor('every schedule to be delivered', () => dispatcher.snapshot().delivered >= produced, {
        timeoutMs: 300_000,
        intervalMs: 20,
      });
      await dispatcher.drain();
      await running;
      delivered = dispatcher.snapshot().delivered;
      const seconds = (Date.now() - started) / 1000;
      const pending = (await backend.store.pageSchedules({ limit: 1 })).items.length;
      // Every schedule's effect exactly once: all rows on SQL backends, a sample of the keys elsewhere.
      let lost = 0;
      let duplicated = 0;
      let checked = 0;
      if (hasSql(spec)) {
        const rows = (await effectRows(backend, spec)) ?? [];
        const distinct = new Set(rows).size;
        checked = produced;
        lost = produced - distinct;
        duplicated = rows.length - distinct;
      } else {
        const step = Math.max(1, Math.floor(produced / 2000));
        for (let i = 0; i < produced; i += step) {
          checked++;
          const n = (await backend.store.loadEvents(`soak/${i}`)).length;
          if (n === 0) lost++;
          if (n > 1) duplicated++;
        }
      }
      const warm = samples[Math.min(2, samples.length - 1)] as ResourceSample;
      const tail = samples.slice(-3);
      const heapGrowth = Math.max(...tail.map((s) => s.heapUsed)) - warm.heapUsed;
      const rssGrowth = Math.max(...tail.map((s) => s.rss)) - warm.rss;
      const handleGrowth = excess(warm.handles, tail.at(-1)?.handles ?? {}).filter(
        (h) => Number(h.split('+')[1]) > 8,
      );
      console.log(
        `[soak ${kind}] ${produced} schedules through in ${seconds.toFixed(0)} s (${Math.round(produced / seconds)}/s); ` +
          `heap ${(warm.heapUsed / MB).toFixed(1)} -> ${(tail.at(-1)!.heapUsed / MB).toFixed(1)} MB, ` +
          `rss ${(warm.rss / MB).toFixed(0)} -> ${(tail.at(-1)!.rss / MB).toFixed(0)} MB; ` +
          `handles ${JSON.stringify(tail.at(-1)?.handles)}`,
      );
      recordResult('soak', kind, 0, {
        schedules: produced,
        seconds: Math.round(seconds),
        heapGrowthMB: Math.round(heapGrowth / MB),
        rssGrowthMB: Math.round(rssGrowth / MB),
        checked,
        lost,
        duplicated,
      });
      expect(samples.length).toBeGreaterThanOrEqual(4);
      if (FULL && kind === 'sqlite') expect(produced).toBe(target);
      expect(delivered).toBe(produced);
      expect(pending).toBe(0);
      expect(lost, `of ${checked} schedules checked, without an effect`).toBe(0);
      expect(duplicated, `of ${checked} schedules checked, with two effects`).toBe(0);
      expect(heapGrowth / MB, 'heap growth after warm-up, MB').toBeLessThan(16);
      expect(rssGrowth / MB, 'RSS growth after warm-up, MB').toBeLessThan(96);
      expect(handleGrowth, 'handle kinds that grew after warm-up').toEqual([]);
    } finally {
      await backend.close();
      await dropTarget(spec);
    }
    // Nothing the backend or the dispatcher opened outlives close(): sockets, timers, listeners.
    await waitFor('open handles to return to where they were before the backend opened', () =>
      excess(handlesBefore, handleCounts()).length === 0 ? true : undefined,
    ).catch((error: Error) => {
      throw new Error(`${error.message}: left open ${excess(handlesBefore, handleCounts()).join(', ')}`);
    });
    expect(excess(listenersBefore, processListeners()), 'process listeners left behind').toEqual([]);
  });
});
