#!/usr/bin/env node
// Prints the results table of docs/reliability.md from the figures the last run of each suite left in
// node_modules/.cache/reliability/<mode>/ (mode: `full` by default, or `ci`).
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const mode = process.argv[2] ?? 'full';
const dir = fileURLToPath(new URL(`../node_modules/.cache/reliability/${mode}/`, import.meta.url));
let files;
try {
  files = readdirSync(dir).filter((f) => f.endsWith('.json'));
} catch {
  console.error(
    `no results in ${dir}: run the suite first (pnpm test:chaos, or pnpm --filter @duetime/reliability test for ci)`,
  );
  process.exit(1);
}
const results = files.map((f) => JSON.parse(readFileSync(new URL(f, `file://${dir}`), 'utf8')));
const of = (suite, backend) => results.find((r) => r.suite === suite && r.backend === backend)?.figures ?? {};
const n = (v) => (v === undefined ? '–' : Number(v).toLocaleString('en-US'));
const sum = (...values) =>
  values.every((v) => v === undefined) ? undefined : values.reduce((a, v) => a + (v ?? 0), 0);

const backends = ['sqlite', 'postgres', 'redis', 'nats'];
console.log('| backend | kills | outages | cases | schedules | soak | lost | duplicated | stuck |');
console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const b of backends) {
  const crash = of('crash-loop', b);
  const outages = of('outages', b);
  const hostile = of('hostile-store', b);
  const soak = of('soak', b);
  const pause = of('pause', b);
  const clock = of('clock-jumps', b);
  console.log(
    `| ${b} | ${n(crash.kills)} | ${n(outages.outages)} | ${n(hostile.cases)} | ${n(sum(crash.schedules, outages.schedules))} | ${n(soak.schedules)} | ${n(sum(crash.lost, outages.lost, soak.lost))} | ${n(sum(crash.duplicated, outages.duplicated, soak.duplicated, pause.duplicated, clock.duplicated))} | ${n(sum(crash.stuck, outages.stuck))} |`,
  );
}
const core = of('hostile-input', 'core');
if (core.cases !== undefined) console.log(`\nHostile input without a server: ${n(core.cases)} cases.`);

const nodeLoss = results.filter((r) => r.suite === 'node-loss');
if (nodeLoss.length > 0) {
  console.log(
    '\n| node loss | nodes lost | worker kills | schedules | ticks | lost | duplicated | stuck | lost away from a failover |',
  );
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const { backend, figures: f } of nodeLoss.sort((a, b) => a.backend.localeCompare(b.backend)))
    console.log(
      `| ${backend} | ${n(f.nodeFaults)} | ${n(f.kills)} | ${n(f.schedules)} | ${n(f.ticks)} | ${n(f.lost)} | ${n(f.duplicated)} | ${n(f.stuck)} | ${n(f.lostOutsideFailover)} |`,
    );
}
const crashes = results.filter((r) => r.suite === 'server-crash');
if (crashes.length > 0) {
  console.log('\n| server SIGKILLed under load | commits acknowledged | lost after the restart |');
  console.log('| --- | ---: | ---: |');
  for (const { backend, figures: f } of crashes)
    console.log(`| ${backend} | ${n(f.acknowledged)} | ${n(f.lost)} |`);
}
