import { freshNamespace } from '@duetime/conformance';
import { newerNatsServerBinary, PrivateNatsServer } from '@duetime/testing';
import { type AuditFigures, audit, describeFigures } from './audit.js';
import { collect, drainDue } from './collect.js';
import { createEffectTable } from './effects.js';
import { ErrorTally } from './logging.js';
import { describeTrouble } from './nats-diagnose.js';
import { OUTAGE_SCHEDULE, OUTAGE_SCOPE, type OutageRunResult, runOutages } from './outage-run.js';
import {
  type FaultInjector,
  postgresTermination,
  proxiedInjector,
  redisClientKill,
  sqliteInjector,
} from './outages.js';
import { Random } from './random.js';
import { type BackendName, dropTarget, newTarget, openTarget, type TargetSpec } from './targets.js';

/** The calendar's period in the outage run, in ms. */
export const OUTAGE_PERIOD = 250;

/** The fault injector of a backend: a proxy in front of its server, plus its server-side fault. */
export async function injectorFor(target: TargetSpec): Promise<FaultInjector> {
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

export interface AuditedOutageRun {
  run: OutageRunResult;
  figures: AuditFigures;
  /** Errors reported during the run, by code. */
  errorCodes: Record<string, number>;
  /** The figures as one line (see {@link describeFigures}). */
  summary: string;
}

/**
 * One outage run on a fresh data set of `kind` (see {@link runOutages}), then the final drain through a
 * direct connection, and the audit of the durable effects. Prints through `log`.
 */
export async function auditedOutageRun(options: {
  kind: BackendName;
  seed: number;
  outages: number;
  label: string;
  log: (line: string) => void;
}): Promise<AuditedOutageRun> {
  const { kind, seed, label, log } = options;
  const base = newTarget(kind, freshNamespace());
  const injector = await injectorFor(base.kind === 'sqlite' ? { ...base, busyTimeoutMs: 1000 } : base);
  const target = injector.direct;
  // Traced too when DUETIME_TRACE_FILE is set: the final drain runs on this instance.
  const direct = await openTarget(target, process.env.DUETIME_TRACE_FILE ? { logger: new ErrorTally() } : {});
  try {
    await createEffectTable(direct.store, target);
    const run = await runOutages({
      injector,
      random: new Random(seed).fork(`outages:${kind}`),
      outages: options.outages,
      period: OUTAGE_PERIOD,
      log: (line) => log(`${label} ${new Date().toISOString()} ${line}`),
    });
    const lastDeadline = Math.max(
      0,
      ...[...run.driver.history.puts.values()].map((p) => p.at).filter((at) => at < Date.now() + 3_600_000),
    );
    const drainedAt = await drainDue(direct, target, { until: lastDeadline + 50, timeoutMs: 120_000 });
    const input = await collect(direct, target, run.driver.history, drainedAt, {
      scope: OUTAGE_SCOPE,
      schedule: OUTAGE_SCHEDULE,
      period: OUTAGE_PERIOD,
      from: run.startedAt - 2000,
      to: drainedAt,
    });
    if (input.ticks) input.ticks.reported = run.reported;
    const figures = audit(input);
    const errorCodes = Object.fromEntries(run.errors.byCode);
    const summary = describeFigures(label, figures, {
      outages: run.total,
      leaderships: run.leaderships,
      'failed transactions': run.driver.stats.failedTransactions,
    });
    log(summary);
    log(
      `${label} faults ${JSON.stringify(run.outages)}; errors reported ${JSON.stringify(errorCodes)}, by the application's own SQL ${run.errors.application}; due-index repairs ${dueIndexRepairs(run)}`,
    );
    for (const line of await describeTrouble(target, figures)) log(`${label} store: ${line}`);
    if (figures.ticksLost > 0)
      for (const r of run.records)
        log(
          `${label} record ${r.intendedAt.toISOString()} ${r.occurrence} ${r.origin} ${r.state} ${r.reason ?? ''} count=${r.count ?? 1} epoch=${r.epoch} ${r.error ?? ''} ${r.detail ?? ''}`,
        );
    return { run, figures, errorCodes, summary };
  } finally {
    await direct.close();
    if (target.kind !== 'nats') await dropTarget(target);
    await injector.close();
  }
}

/**
 * How often the run's backends had to index due schedules again (the NATS store's reconciliation sweep,
 * which warns each time): 0 unless the due index missed a due schedule.
 */
export function dueIndexRepairs(run: OutageRunResult): number {
  let n = 0;
  for (const [message, count] of run.errors.warnings)
    if (/due index; indexed again/.test(message)) n += count;
  return n;
}
