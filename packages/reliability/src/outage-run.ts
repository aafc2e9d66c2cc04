import { waitFor } from '@duetime/conformance';
import {
  type Backend,
  Dispatcher,
  every,
  Registry,
  type ScheduleRecord,
  Scheduler,
  storeTarget,
} from '@duetime/core';
import { ScheduleDriver } from './driver.js';
import { recordDelivery, tickMessage } from './effects.js';
import { ErrorTally } from './logging.js';
import type { FaultInjector, OutageKind } from './outages.js';
import type { Random } from './random.js';
import { openTarget } from './targets.js';

/** Scope of the outage run's calendar, so the audit derives the same occurrence ids. */
export const OUTAGE_SCOPE = { namespace: 'rel', environment: 'production', group: 'outages' } as const;
export const OUTAGE_SCHEDULE = 'tick';
const CURSOR_KEY = `${OUTAGE_SCOPE.namespace}/calendar/${OUTAGE_SCOPE.environment}/${OUTAGE_SCOPE.group}/cursor/${OUTAGE_SCHEDULE}`;

export interface OutageRunOptions {
  injector: FaultInjector;
  random: Random;
  outages: number;
  period: number;
  log?: (line: string) => void;
}

export interface OutageRunResult {
  driver: ScheduleDriver;
  /** Faults injected, by kind. */
  outages: Partial<Record<OutageKind, number>>;
  total: number;
  /** Occurrences the scheduler itself reported as failed or skipped (visible, so not silently lost). */
  reported: Set<string>;
  errors: ErrorTally;
  startedAt: number;
  /** Leaderships the scheduler took (it loses leadership in long blackholes). */
  leaderships: number;
  /** Every finished record the scheduler reported, in order (to explain an audit finding). */
  records: ScheduleRecord[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs a dispatcher, a scheduler (an `every` declaration enqueuing each occurrence with `storeTarget`) and
 * the driver, all on backends opened through the fault injector's path, and injects `outages` faults one
 * after the other with healthy pauses between them. Then heals, lets the scheduler catch up, and stops
 * everything. Every error reported on the way is tallied.
 */
export async function runOutages(options: OutageRunOptions): Promise<OutageRunResult> {
  const { injector, random } = options;
  const log = options.log ?? (() => {});
  const errors = new ErrorTally();
  const target = injector.faulty;
  const startedAt = Date.now();
  const opened: Backend[] = [];
  const stop = new AbortController();
  const stopDriver = new AbortController();
  const reported = new Set<string>();
  const records: ScheduleRecord[] = [];
  let leaderships = 0;
  try {
    const worker = await openTarget(target, { logger: errors });
    opened.push(worker);
    const writer = await openTarget(target, { logger: errors });
    opened.push(writer);
    const dispatcher = new Dispatcher({
      store: worker.store,
      concurrency: 4,
      rescanInterval: 200,
      retryDelay: 50,
      logger: errors,
      processor: (tx, message, { schedule }) => recordDelivery(tx, message, schedule, target),
    });
    let lastEpoch: number | undefined;
    const scheduler = new Scheduler({
      registry: new Registry(
        every(
          OUTAGE_SCHEDULE,
          options.period,
          storeTarget(worker.store, (invocation) =>
            tickMessage(invocation.occurrence, invocation.intendedAt.getTime()),
          ),
        ).with({ catchUp: { window: 3_600_000, max: 100_000 } }),
      ),
      backend: worker,
      ...OUTAGE_SCOPE,
      leadershipTTL: 1500,
      pollInterval: 100,
      grace: 1000,
      capacityWait: 600_000,
      drainTimeout: 10_000,
      logger: errors,
      onRecord: (record) => {
        if (record.state !== 'running') records.push(record);
        if (record.state === 'failed' || record.state === 'skipped') reported.add(record.occurrence);
        if (record.epoch !== undefined && record.epoch !== lastEpoch) {
          lastEpoch = record.epoch;
          leaderships++;
        }
      },
    });
    const driver = new ScheduleDriver({
      store: writer.store,
      random: random.fork('driver'),
      onError: (error) => errors.note(error),
    });
    const running = [dispatcher.run(stop.signal), scheduler.run(stop.signal)];
    const driving = driver.run(stopDriver.signal, 15);
    const outages: Partial<Record<OutageKind, number>> = {};
    let total = 0;
    try {
      for (let i = 0; i < options.outages; i++) {
        await sleep(random.int(200, 900));
        const kind = random.pick(injector.kinds);
        const what = await injector.inject(kind, random);
        outages[kind] = (outages[kind] ?? 0) + 1;
        total++;
        log(`outage ${total}: ${kind} (${what})`);
      }
      await sleep(500);
    } finally {
      stopDriver.abort();
      await driving;
    }
    // Healed: the scheduler must catch up with the present before it is stopped (see the crash loop).
    await waitFor(
      'the scheduler to catch up after the outages',
      async () => {
        const cursor = await worker.cursors.read(CURSOR_KEY);
        return cursor !== undefined && cursor.getTime() >= Date.now() - 2000 - options.period;
      },
      { timeoutMs: 120_000, intervalMs: 100 },
    );
    stop.abort();
    await Promise.all(running);
    return { driver, outages, total, reported, errors, startedAt, leaderships, records };
  } finally {
    stop.abort();
    stopDriver.abort();
    await Promise.allSettled(opened.map((b) => b.close()));
  }
}
