/**
 * `pnpm bench [--quick] [--only enqueue,drain,...] [--rounds N] [--subjects duetime/sqlite,bullmq/best,...]`
 *
 * Runs each workload against duetime (every backend that applies) and the libraries users would pick
 * instead, alternating subjects round by round on the same machine and servers, and writes
 * bench/results/<workload>.json plus the summary tables in bench/README.md (full runs only; quick runs write
 * <workload>.quick.json and leave the README alone).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { type ResultFile, readResult, refreshReadme, resultsSection } from './lib/readme.js';
import { renderTables } from './lib/render.js';
import type { Row } from './lib/report.js';
import type { BenchContext } from './lib/run.js';
import { peerVersions } from './lib/versions.js';
import { DUETIME_BACKENDS, SCALEOUT_TARGETS } from './subjects/duetime.js';
import {
  allSubjects,
  recurringSubjects,
  subjectNames,
  telemetrySubjects,
  variantSubjects,
} from './subjects/index.js';
import type { RecurringSubject, Subject } from './subjects/types.js';
import { CLUSTER_TARGETS, clusterFailoverWorkload } from './workloads/cluster-failover.js';
import { cronWorkload } from './workloads/cron.js';
import { dashboardWorkload } from './workloads/dashboard.js';
import { durabilityWorkload } from './workloads/durability.js';
import { failoverWorkload } from './workloads/failover.js';
import { idleWorkload } from './workloads/idle.js';
import { ormWorkload } from './workloads/orm.js';
import { pendingWorkload } from './workloads/pending.js';
import { primitivesWorkload } from './workloads/primitives.js';
import { drainWorkload, enqueueWorkload, latenessWorkload, telemetryWorkload } from './workloads/queue.js';
import { recurringWorkload } from './workloads/recurring.js';
import { scaleWorkload } from './workloads/scale.js';
import { scaleoutWorkload } from './workloads/scaleout.js';
import { tickWorkload } from './workloads/tick.js';
import { timersWorkload } from './workloads/timers.js';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    rounds: { type: 'string' },
    subjects: { type: 'string' },
    'readme-only': { type: 'boolean' },
  },
});
const subjectFilter = values.subjects?.split(',').map((s) => s.trim());
const unknownSubjects = (subjectFilter ?? []).filter((name) => !subjectNames().includes(name));
if (unknownSubjects.length > 0) {
  console.error(`unknown subject ${unknownSubjects.join(', ')}; known: ${subjectNames().join(', ')}`);
  process.exit(2);
}
const chosen = <S extends Subject | RecurringSubject>(list: S[]) =>
  list.filter((s) => !subjectFilter || subjectFilter.includes(s.name));
const subjects = () => chosen(allSubjects());
/** The comparison subjects plus duetime's settings variants, where the setting matters. */
const withVariants = () => chosen([...allSubjects(), ...variantSubjects()]);

/** duetime's backends for the workloads that run duetime alone (`--subjects duetime/redis` narrows them). */
const backends = () =>
  DUETIME_BACKENDS.filter(
    (kind) => !subjectFilter || subjectFilter.some((name) => name.startsWith(`duetime/${kind}`)),
  );

/** The scaleout workload's servers (`--subjects duetime/redis-cluster` names one exactly). */
const scaleoutTargets = () =>
  SCALEOUT_TARGETS.filter((target) => !subjectFilter || subjectFilter.includes(`duetime/${target}`));

/** The clusters of the cluster-failover workload (`--subjects duetime/nats-cluster` names one exactly). */
const clusterTargets = () =>
  CLUSTER_TARGETS.filter((target) => !subjectFilter || subjectFilter.includes(`duetime/${target}`));

/** Every workload, in the order a full run takes them. */
const workloads: Record<string, (ctx: BenchContext) => Promise<Row[]>> = {
  enqueue: (ctx) => enqueueWorkload(ctx, withVariants()),
  drain: (ctx) => drainWorkload(ctx, withVariants()),
  telemetry: (ctx) => telemetryWorkload(ctx, chosen(telemetrySubjects())),
  lateness: (ctx) => latenessWorkload(ctx, subjects()),
  idle: (ctx) => idleWorkload(ctx, subjects()),
  scale: (ctx) => scaleWorkload(ctx, backends()),
  scaleout: (ctx) => scaleoutWorkload(ctx, scaleoutTargets()),
  recurring: (ctx) => recurringWorkload(ctx, chosen(recurringSubjects())),
  cron: (ctx) => cronWorkload(ctx),
  failover: (ctx) => failoverWorkload(ctx, backends()),
  'cluster-failover': (ctx) => clusterFailoverWorkload(ctx, clusterTargets()),
  tick: (ctx) => tickWorkload(ctx),
  timers: (ctx) => timersWorkload(ctx),
  durability: (ctx) => durabilityWorkload(ctx),
  orm: (ctx) => ormWorkload(ctx),
  primitives: (ctx) => primitivesWorkload(ctx),
  pending: (ctx) => pendingWorkload(ctx),
  dashboard: (ctx) => dashboardWorkload(ctx),
};

const quick = values.quick === true;
// --readme-only rewrites the README's results from the results/*.json present, measuring nothing.
const selected = values['readme-only']
  ? []
  : values.only
    ? values.only.split(',').map((w) => w.trim())
    : Object.keys(workloads);
for (const name of selected) {
  if (!workloads[name]) {
    console.error(`unknown workload ${name}; known: ${Object.keys(workloads).join(', ')}`);
    process.exit(2);
  }
}
const rounds = values.rounds ? Number(values.rounds) : quick ? 1 : 3;
if (!Number.isInteger(rounds) || rounds < 1) {
  console.error(`--rounds must be a positive integer, got ${values.rounds}`);
  process.exit(2);
}
const ctx: BenchContext = { quick, rounds, log: (line) => console.log(line) };

const resultsDir = new URL('../results/', import.meta.url);
mkdirSync(resultsDir, { recursive: true });
const machine: ResultFile['machine'] = {
  cpus: cpus().length,
  cpuModel: cpus()[0]?.model ?? 'unknown',
  memoryGb: Math.round(totalmem() / 2 ** 30),
  node: process.version,
};
const runStarted = Date.now();
for (const name of selected) {
  console.log(`\n== ${name}${quick ? ' (quick)' : ''}, ${rounds} round${rounds > 1 ? 's' : ''}`);
  const started = Date.now();
  const loadBefore = loadavg()[0]!;
  const rows = await workloads[name]!(ctx);
  const seconds = Math.round((Date.now() - started) / 1000);
  const file = new URL(`${name}${quick ? '.quick' : ''}.json`, resultsDir);
  const load = [loadBefore, loadavg()[0]!].map((l) => Math.round(l * 10) / 10);
  const result: ResultFile = {
    workload: name,
    quick,
    rounds,
    date: new Date().toISOString(),
    machine,
    loadAverage: load,
    peers: peerVersions(rows.map((r) => r.subject)),
    seconds,
    rows,
  };
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  console.log(renderTables(rows));
  console.log(`${name}: ${seconds} s`);
}
console.log(`\nall done in ${Math.round((Date.now() - runStarted) / 1000)} s`);

// Refresh the generated section of bench/README.md from every full-mode result file present.
if (!quick) {
  const section = resultsSection(Object.keys(workloads), (name) => readResult(resultsDir, name));
  if (!refreshReadme(new URL('../README.md', import.meta.url), section))
    console.error('bench/README.md has no results markers: tables not written');
}
process.exit(0);
