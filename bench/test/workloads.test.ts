import { createServer, type Server } from 'node:net';
import { parseCron } from '@duetime/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type ResultFile, resultsSection } from '../src/lib/readme.js';
import { renderTables } from '../src/lib/render.js';
import { listeningPids, portsOf, sampleCpu } from '../src/lib/server-load.js';
import { SCALEOUT_TARGETS } from '../src/subjects/duetime.js';
import { recurringSubjectByName, recurringSubjects, subjectNames } from '../src/subjects/index.js';
import { CLUSTER_TARGETS, longestGap } from '../src/workloads/cluster-failover.js';
import {
  type Delivery,
  EVERY_MINUTE,
  nextMinute,
  type RecurringResult,
  recurringItems,
  recurringRows,
  summarizeDeliveries,
  ZONES,
} from '../src/workloads/recurring.js';
import { runName, type ScaleoutResult, scaleoutRows, scaleoutRuns } from '../src/workloads/scaleout.js';

function file(workload: string, rows: ResultFile['rows']): ResultFile {
  return {
    workload,
    quick: false,
    rounds: 2,
    date: '2026-12-01T00:00:00.000Z',
    machine: { cpus: 2, cpuModel: 'test cpu', memoryGb: 1, node: 'v20.20.2' },
    peers: { bullmq: '6.7.0', 'pg-boss': '12.38.0' },
    seconds: 1,
    rows,
  };
}

describe('recurring workload', () => {
  it('has duetime on every backend and each peer at its defaults and at its best, by the names --subjects accepts', () => {
    const names = recurringSubjects().map((s) => s.name);
    expect(names).toEqual([
      'duetime/sqlite',
      'duetime/postgres',
      'duetime/redis',
      'duetime/nats',
      'pg-boss',
      'pg-boss/best',
      'bullmq',
      'bullmq/best',
    ]);
    for (const name of names) {
      expect(subjectNames()).toContain(name);
      expect(recurringSubjectByName(name).name).toBe(name);
    }
    expect(recurringSubjectByName('bullmq/best').backend).toBe('redis');
    expect(recurringSubjectByName('pg-boss').backend).toBe('postgres');
    expect(() => recurringSubjectByName('graphile-worker')).toThrow(
      /unknown recurring bench subject graphile-worker/,
    );
  });

  it('spreads the schedules over every expression and zone, each firing on every minute', () => {
    const items = recurringItems(EVERY_MINUTE.length * ZONES.length * 2);
    expect(new Set(items.map((i) => i.key)).size).toBe(items.length);
    expect(new Set(items.map((i) => `${i.cron} ${i.zone}`)).size).toBe(EVERY_MINUTE.length * ZONES.length);
    // Across the 2026 spring change of Europe/Berlin and a day boundary of Pacific/Chatham (UTC+13:45).
    const from = new Date('2026-03-29T00:58:30Z');
    for (const cron of EVERY_MINUTE)
      for (const zone of ZONES) {
        const spec = parseCron(cron, zone);
        let at = spec.next(from)!;
        expect(at.toISOString(), `${cron} in ${zone}`).toBe('2026-03-29T00:59:00.000Z');
        for (let i = 0; i < 3; i++) {
          const next = spec.next(at)!;
          expect(next.getTime() - at.getTime(), `${cron} in ${zone}`).toBe(60_000);
          at = next;
        }
      }
  });

  it('counts each occurrence once, its lateness from deliveries started in the window and the share of due ones', () => {
    const from = 600_000;
    const to = from + 120_000;
    const deliveries: Delivery[] = [
      { key: 'a', instant: from - 60_000, startedAt: from - 59_000 }, // before the window: not counted
      { key: 'b', instant: from - 60_000, startedAt: from + 1_000 }, // late from before: lateness only
      { key: 'a', instant: from, startedAt: from + 100 },
      { key: 'a', instant: from, startedAt: from + 900 }, // the same occurrence again: counted once
      { key: 'b', instant: from, startedAt: from + 300 },
      { key: 'a', instant: from + 60_000, startedAt: from + 60_200 },
      { key: 'b', instant: from + 60_000, startedAt: to + 5 }, // after the window: not delivered in it
      { key: 'c', startedAt: from + 10 }, // no instant known: not counted
    ];
    const result = summarizeDeliveries(deliveries, from, to, 2 * 2);
    expect(result.perSecond).toBe(Math.round(4 / 120));
    expect(result.p50).toBe(200);
    expect(result.p99).toBe(61_000);
    expect(result.deliveredPercent).toBe(75);
    expect(summarizeDeliveries([], from, to, 4)).toMatchObject({ perSecond: 0, deliveredPercent: 0 });
    expect(Number.isNaN(summarizeDeliveries([], from, to, 4).p99)).toBe(true);
    expect(nextMinute(from)).toBe(from);
    expect(nextMinute(from + 1)).toBe(from + 60_000);
  });

  it('renders a table per metric, with duetime ÷ peer on the same server', () => {
    const sample = (perSecond: number, p99: number): RecurringResult => ({
      perSecond,
      p50: p99 / 2,
      p99,
      deliveredPercent: perSecond >= 1667 ? 100 : 40,
    });
    const samples = new Map<string, RecurringResult[]>([
      ['duetime/redis', [sample(1667, 2000), sample(1667, 3000)]],
      ['bullmq', [sample(1667, 10_000), sample(1667, 10_000)]],
      ['pg-boss/best', [sample(50, 240_000), sample(50, 250_000)]],
    ]);
    const rows = recurringRows(100_000, 5, recurringSubjects(), samples);
    const section = resultsSection(['recurring'], () => file('recurring', rows));
    expect(section).toContain(
      '**100,000 schedules every minute for 5 minutes (1,667 occurrences/s due), occurrences/s delivered** (items/s, higher is better)',
    );
    expect(section).toContain('(1,667 occurrences/s due), lateness p99** (ms, lower is better)');
    expect(section).toContain('due occurrences delivered within the window** (%, higher is better)');
    expect(section).toContain(
      '| duetime/redis | 2,500 (2,000–3,000) | vs bullmq: **0.25×** ✓ (0.20, 0.30) |',
    );
    expect(section).toContain('| pg-boss/best | 245,000 (240,000–250,000) |');
    // Subjects without samples (not selected) have no rows.
    expect(rows.some((r) => r.subject === 'duetime/sqlite')).toBe(false);
    expect(section).toContain('; peers: bullmq 6.7.0, pg-boss 12.38.0_');
  });
});

describe('scaleout workload', () => {
  const servers: Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
  });

  it('names each server and process count, and --subjects accepts every server', () => {
    expect(SCALEOUT_TARGETS).toEqual(['postgres', 'redis', 'redis-cluster', 'nats', 'nats-cluster']);
    for (const target of SCALEOUT_TARGETS) expect(subjectNames()).toContain(`duetime/${target}`);
    expect(new Set(subjectNames()).size).toBe(subjectNames().length);
    expect(scaleoutRuns(['redis-cluster']).map((r) => r.name)).toEqual([
      'duetime/redis-cluster, 1 process',
      'duetime/redis-cluster, 2 processes',
      'duetime/redis-cluster, 4 processes',
    ]);
  });

  it('renders items/s, the ratio to one process in the same round and the CPU shares', () => {
    const runs = scaleoutRuns(['postgres']);
    const result = (itemsPerSecond: number, serverPercent: number): ScaleoutResult => ({
      itemsPerSecond,
      serverPercent,
      clientPercent: 90,
      machinePercent: 195,
    });
    const samples = new Map<string, ScaleoutResult[]>([
      [runName('postgres', 1), [result(4000, 60), result(5000, 70)]],
      [runName('postgres', 2), [result(7200, 110), result(8000, 120)]],
      [runName('postgres', 4), [result(8000, 130), result(Number.NaN, Number.NaN)]],
    ]);
    const rows = scaleoutRows(50_000, runs, samples);
    const tables = renderTables(rows);
    expect(tables).toContain(
      '**50,000 due items, drained by N dispatcher processes** (items/s, higher is better)',
    );
    expect(tables).toContain('| duetime/postgres, 2 processes | 7,600 (7,200–8,000) |  |');
    expect(tables).toContain(
      '**50,000 due items, items/s with N processes ÷ with 1 (same round)** (×, higher is better)',
    );
    expect(tables).toContain('| duetime/postgres, 2 processes | 1.70 (1.60–1.80) |  |');
    // A failed round is n/a in the ratio, not a number.
    expect(rows.find((r) => r.unit === '×' && r.subject === runName('postgres', 4))?.summary.samples).toEqual(
      [2, Number.NaN],
    );
    expect(rows.some((r) => r.unit === '×' && r.subject === runName('postgres', 1))).toBe(false);
    expect(tables).toContain(
      "**50,000 due items, server processes' CPU during the drain** (% of a core, lower is better)",
    );
    expect(tables).toContain('| duetime/postgres, 1 process | 65 (60–70) |  |');
    expect(tables).toContain('2 cores: at most 200%');
  });

  it('finds the process listening on a port and samples its CPU time', async () => {
    const server = createServer();
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    expect(listeningPids([port])).toContain(process.pid);
    expect(portsOf([`redis://127.0.0.1:${port}`, 'nats://127.0.0.1'], 4222)).toEqual([port, 4222]);

    const sampler = sampleCpu(() => [process.pid]);
    await sampler.ready;
    // Busy until this process has used 150 ms of CPU by its own account, then read the sample.
    const before = process.cpuUsage();
    let spins = 0;
    for (;;) {
      const used = process.cpuUsage(before);
      if (used.user + used.system >= 150_000) break;
      spins++;
    }
    const sample = await sampler.stop();
    expect(spins).toBeGreaterThan(0);
    expect(sample.pids).toEqual([process.pid]);
    expect(sample.seconds).toBeGreaterThanOrEqual(0.1);
  });
});

describe('cluster-failover workload', () => {
  it('runs on the two clusters, by the names --subjects accepts', () => {
    expect(CLUSTER_TARGETS).toEqual(['redis-cluster', 'nats-cluster']);
    for (const target of CLUSTER_TARGETS) expect(subjectNames()).toContain(`duetime/${target}`);
  });

  it('measures the longest gap between occurrences from the last one before the loss on', () => {
    // Every second, then a loss at 3,500: nothing from 3,000 until 9,200, then every second again.
    const instants = [1000, 2000, 3000, 9200, 10_200, 11_200];
    expect(longestGap(instants, 3500)).toBe(6200);
    // Occurrences before the loss do not count, however far apart.
    expect(longestGap([0, 20_000, 21_000, 22_000], 21_500)).toBe(1000);
    // A calendar that went on untouched: the period.
    expect(longestGap([1000, 2000, 3000, 4000], 2500)).toBe(1000);
    expect(longestGap([], 0)).toBe(0);
  });
});
