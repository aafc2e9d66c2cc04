/**
 * `pnpm bench [--quick] [--only enqueue,drain,...] [--rounds N] [--subjects duetime/sqlite,bullmq,...]`
 *
 * Runs each workload against duetime (every backend that applies) and the libraries users would pick
 * instead, alternating subjects round by round on the same machine and servers, and writes
 * bench/results/<workload>.json plus the summary tables in bench/README.md.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { renderTables } from './lib/render.js';
import type { Row } from './lib/report.js';
import type { BenchContext } from './lib/run.js';
import { allSubjects } from './subjects/index.js';
import { cronWorkload } from './workloads/cron.js';
import { failoverWorkload } from './workloads/failover.js';
import { drainWorkload, enqueueWorkload, idleWorkload, latenessWorkload } from './workloads/queue.js';
import { scaleWorkload } from './workloads/scale.js';

const subjects = () => allSubjects().filter((s) => !subjectFilter || subjectFilter.includes(s.name));
const workloads: Record<string, (ctx: BenchContext) => Promise<Row[]>> = {
  enqueue: (ctx) => enqueueWorkload(ctx, subjects()),
  drain: (ctx) => drainWorkload(ctx, subjects()),
  lateness: (ctx) => latenessWorkload(ctx, subjects()),
  idle: (ctx) => idleWorkload(ctx, subjects()),
  scale: (ctx) => scaleWorkload(ctx),
  cron: (ctx) => cronWorkload(ctx),
  failover: (ctx) => failoverWorkload(ctx),
};

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    only: { type: 'string' },
    rounds: { type: 'string' },
    subjects: { type: 'string' },
  },
});
const subjectFilter = values.subjects?.split(',').map((s) => s.trim());
const quick = values.quick === true;
const selected = values.only ? values.only.split(',').map((w) => w.trim()) : Object.keys(workloads);
for (const name of selected) {
  if (!workloads[name]) {
    console.error(`unknown workload ${name}; known: ${Object.keys(workloads).join(', ')}`);
    process.exit(2);
  }
}
const ctx: BenchContext = {
  quick,
  rounds: values.rounds ? Number(values.rounds) : 3,
  log: (line) => console.log(line),
};

const resultsDir = new URL('../results/', import.meta.url);
mkdirSync(resultsDir, { recursive: true });
const machine = {
  cpus: cpus().length,
  cpuModel: cpus()[0]?.model ?? 'unknown',
  memoryGb: Math.round(totalmem() / 2 ** 30),
  node: process.version,
};
for (const name of selected) {
  console.log(`\n== ${name}${quick ? ' (quick)' : ''}`);
  const started = Date.now();
  const rows = await workloads[name]!(ctx);
  const file = new URL(`${name}${quick ? '.quick' : ''}.json`, resultsDir);
  writeFileSync(
    file,
    `${JSON.stringify({ workload: name, quick, rounds: ctx.rounds, date: new Date().toISOString(), machine, seconds: Math.round((Date.now() - started) / 1000), rows }, null, 2)}\n`,
  );
  console.log(renderTables(rows));
}

// Refresh the generated section of bench/README.md from every full-mode result file present.
const readmeUrl = new URL('../README.md', import.meta.url);
const readme = readFileSync(readmeUrl, 'utf8');
const start = '<!-- results:start -->';
const end = '<!-- results:end -->';
if (!quick && readme.includes(start) && readme.includes(end)) {
  const sections: string[] = [];
  for (const name of Object.keys(workloads)) {
    try {
      const data = JSON.parse(readFileSync(new URL(`${name}.json`, resultsDir), 'utf8')) as {
        rows: Row[];
        date: string;
        rounds: number;
        machine: typeof machine;
      };
      sections.push(
        `### ${name}\n\n_${data.date.slice(0, 10)}, ${data.rounds} rounds, ${data.machine.cpus} cores, Node ${data.machine.node}_\n\n${renderTables(data.rows)}`,
      );
    } catch {
      sections.push(`### ${name}\n\nNot measured yet: run \`pnpm bench --only ${name}\`.`);
    }
  }
  const before = readme.slice(0, readme.indexOf(start) + start.length);
  const after = readme.slice(readme.indexOf(end));
  writeFileSync(readmeUrl, `${before}\n\n${sections.join('\n\n')}\n\n${after}`);
}
process.exit(0);
