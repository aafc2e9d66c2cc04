import { freshNamespace } from '@duetime/conformance';
import { newerNatsServerBinary, PrivateNatsServer } from '@duetime/testing';
import { describe, expect, it } from 'vitest';
import { audit, describeFigures } from '../src/audit.js';
import { collect, drainDue } from '../src/collect.js';
import { createEffectTable } from '../src/effects.js';
import { SIZES, selectedBackends } from '../src/mode.js';
import { OUTAGE_SCHEDULE, OUTAGE_SCOPE, runOutages } from '../src/outage-run.js';
import {
  type FaultInjector,
  postgresTermination,
  proxiedInjector,
  redisClientKill,
  sqliteInjector,
} from '../src/outages.js';
import { Random, runSeed } from '../src/random.js';
import { recordResult } from '../src/results.js';
import {
  assertServiceUp,
  BACKENDS,
  dropTarget,
  newTarget,
  openTarget,
  type TargetSpec,
} from '../src/targets.js';

const PERIOD = 250;

async function injectorFor(target: TargetSpec): Promise<FaultInjector> {
  switch (target.kind) {
    case 'sqlite':
      return sqliteInjector(target);
    case 'postgres':
      return proxiedInjector(target, postgresTermination(target));
    case 'redis':
      return proxiedInjector(target, redisClientKill(target));
    case 'nats': {
      // Restarting the shared server would disturb everyone else: the run gets a server of its own.
      const server = await PrivateNatsServer.start({ binary: newerNatsServerBinary() });
      const injector = await proxiedInjector(
        { ...target, url: server.url },
        {
          name: 'restart',
          async fault(random) {
            const down = random.int(200, 1700);
            await server.restart(down);
            return `nats-server killed and restarted after ${down} ms`;
          },
        },
      );
      return {
        ...injector,
        async close() {
          await injector.close();
          await server.dispose();
        },
      };
    }
  }
}

describe.each(selectedBackends(BACKENDS))('outages on %s', (kind) => {
  it(`injects ${SIZES.outages} faults while work runs: nothing lost, nothing twice, every error typed`, async () => {
    await assertServiceUp(kind);
    const seed = runSeed();
    const label = `[outages ${kind}]`;
    console.log(`${label} seed ${seed} (replay: DUETIME_CHAOS_SEED=${seed} DUETIME_CHAOS_BACKENDS=${kind})`);
    const base = newTarget(kind, freshNamespace());
    const injector = await injectorFor(base.kind === 'sqlite' ? { ...base, busyTimeoutMs: 1000 } : base);
    const target = injector.direct;
    const direct = await openTarget(target);
    try {
      await createEffectTable(direct.store, target);
      const run = await runOutages({
        injector,
        random: new Random(seed).fork(`outages:${kind}`),
        outages: SIZES.outages,
        period: PERIOD,
        log: (line) => console.log(`${label} ${new Date().toISOString()} ${line}`),
      });
      const lastDeadline = Math.max(
        0,
        ...[...run.driver.history.puts.values()].map((p) => p.at).filter((at) => at < Date.now() + 3_600_000),
      );
      const drainedAt = await drainDue(direct, target, { until: lastDeadline + 50, timeoutMs: 120_000 });
      const input = await collect(direct, target, run.driver.history, drainedAt, {
        scope: OUTAGE_SCOPE,
        schedule: OUTAGE_SCHEDULE,
        period: PERIOD,
        from: run.startedAt - 2000,
        to: drainedAt,
      });
      if (input.ticks) input.ticks.reported = run.reported;
      const figures = audit(input);
      const errorCodes = Object.fromEntries(run.errors.byCode);
      console.log(
        describeFigures(label, figures, {
          outages: run.total,
          leaderships: run.leaderships,
          'failed transactions': run.driver.stats.failedTransactions,
        }),
      );
      console.log(
        `${label} faults ${JSON.stringify(run.outages)}; errors reported ${JSON.stringify(errorCodes)}, by the application's own SQL ${run.errors.application}`,
      );
      recordResult('outages', kind, seed, {
        outages: run.total,
        schedules: figures.schedules,
        delivered: figures.delivered,
        uncertain: figures.uncertain,
        ticks: figures.ticks,
        ticksReportedFailed: figures.ticksReported,
        lost: figures.lost + figures.ticksLost,
        duplicated: figures.duplicated + figures.ticksDuplicated,
        stuck: figures.stuck,
        untypedErrors: run.errors.untypedCount,
      });
      const problems = figures.problems.join('\n');
      if (figures.ticksLost > 0)
        for (const r of run.records)
          console.log(
            `${label} record ${r.intendedAt.toISOString()} ${r.occurrence} ${r.origin} ${r.state} ${r.reason ?? ''} count=${r.count ?? 1} epoch=${r.epoch} ${r.error ?? ''} ${r.detail ?? ''}`,
          );
      expect(run.total).toBe(SIZES.outages);
      expect(run.errors.untyped, 'errors that are not DuetimeErrors').toEqual([]);
      expect(figures.lost, problems).toBe(0);
      expect(figures.duplicated, problems).toBe(0);
      expect(figures.stuck, problems).toBe(0);
      expect(figures.unexpected, problems).toBe(0);
      expect(figures.torn, problems).toBe(0);
      expect(figures.ticksLost, problems).toBe(0);
      expect(figures.ticksDuplicated, problems).toBe(0);
      // Work went on through the faults: schedules delivered and calendar ticks enqueued and delivered.
      expect(figures.delivered).toBeGreaterThan(0);
      expect(figures.ticks).toBeGreaterThan(10);
    } finally {
      await direct.close();
      if (target.kind !== 'nats') await dropTarget(target);
      await injector.close();
    }
  });
});
