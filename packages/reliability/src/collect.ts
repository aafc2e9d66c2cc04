import { waitFor } from '@duetime/conformance';
import { type Backend, Dispatcher, type OccurrenceScope, occurrenceId, type Schedule } from '@duetime/core';
import type { AuditInput, TickInput } from './audit.js';
import type { History } from './driver.js';
import {
  type Delivery,
  effectRows,
  effectStream,
  loadDeliveries,
  recordDelivery,
  tickStream,
} from './effects.js';
import type { TargetSpec } from './targets.js';

/**
 * The final clean dispatcher: delivers everything due, then reports when nothing with a passed deadline
 * is pending any more. Waits first until every deadline the driver set (short of the far-future ones)
 * has passed. Returns that moment; what is still due then is stuck.
 */
export async function drainDue(
  backend: Backend,
  target: TargetSpec,
  options: { until: number; timeoutMs: number },
): Promise<number> {
  const dispatcher = new Dispatcher({
    store: backend.store,
    concurrency: 4,
    rescanInterval: 100,
    retryDelay: 20,
    processor: (tx, message, { schedule }) => recordDelivery(tx, message, schedule, target),
  });
  const running = dispatcher.run();
  let drainedAt = Date.now();
  try {
    await waitFor(
      'every due schedule to be delivered by the final dispatcher',
      async () => {
        const now = Date.now();
        if (now < options.until) return false;
        // Anything pending with a deadline passed, claimed by a killed process or not (dueSchedules
        // may hide claimed ones until their claim expires).
        const due = await backend.store.pageSchedules({ through: new Date(now), limit: 1 });
        if (due.items.length > 0 || dispatcher.snapshot().inFlight > 0) return false;
        drainedAt = now;
        return true;
      },
      { timeoutMs: options.timeoutMs, intervalMs: 50 },
    );
  } catch (error) {
    // Whatever is still due now is reported as stuck by the audit; the wait's last answer (a schedule
    // still due, or the error every poll ended with) goes in the log.
    console.log(`[drain] ${error instanceof Error ? error.message : String(error)}`);
    drainedAt = Date.now();
  } finally {
    await dispatcher.drain();
    await running;
  }
  return drainedAt;
}

/** Reads `count` items with at most `parallel` reads in flight. */
export async function readAll<T, R>(
  items: T[],
  parallel: number,
  read: (item: T) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, items.length) }, async () => {
      for (let i = next++; i < items.length; i = next++) results[i] = await read(items[i] as T);
    }),
  );
  return results;
}

export interface TickGrid {
  scope: OccurrenceScope;
  schedule: string;
  period: number;
  from: number;
  to: number;
}

/** Reads the durable effects and what is pending, for the audit. */
export async function collect(
  backend: Backend,
  target: TargetSpec,
  history: History,
  drainedAt: number,
  grid?: TickGrid,
): Promise<AuditInput> {
  const store = backend.store;
  const keys = [...history.byKey.keys()];
  const lists = await readAll(keys, 16, (key) => loadDeliveries(store, effectStream(key)));
  const deliveries = new Map<string, Delivery[]>();
  keys.forEach((key, i) => {
    deliveries.set(key, lists[i] ?? []);
  });
  const pending = new Map<string, Schedule>();
  for await (const s of store.iterateSchedules()) pending.set(s.key, s);
  const input: AuditInput = { history, deliveries, pending, drainedAt };
  // The scheduler's own schedules (storeTarget keys) are audited as ticks, not as the driver's keys.
  if (grid) {
    const start = Math.ceil(grid.from / grid.period) * grid.period;
    const instants: number[] = [];
    for (let at = start; at <= grid.to; at += grid.period) instants.push(at);
    const ticks: TickInput['instants'] = await readAll(instants, 16, async (at) => {
      const occurrence = occurrenceId(grid.scope, grid.schedule, at);
      const [delivered, marks] = await Promise.all([
        loadDeliveries(store, tickStream(occurrence)),
        store.loadEvents(`calendar/${occurrence}`),
      ]);
      return { at, occurrence, deliveries: delivered, marks: marks.length };
    });
    input.ticks = { instants: ticks };
  }
  const rows = await effectRows(backend, target);
  if (rows) input.rows = rows;
  return input;
}
