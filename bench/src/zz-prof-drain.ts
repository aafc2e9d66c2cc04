import { Dispatcher } from '@duetime/core';
import { openDuetime } from './subjects/duetime.js';

const kind = (process.argv[2] ?? 'redis') as 'redis';
const concurrency = Number(process.argv[3] ?? 16);
const count = Number(process.argv[4] ?? 5000);
const seed = await openDuetime(kind);
const now = Date.now();
for (let i = 0; i < count; i += 500) {
  await seed.backend.store.transact(async (tx) => {
    for (let j = i; j < i + 500; j++)
      await tx.schedule(`p/${j}`, new Date(now - 60_000 + j), { type: 'x', aggregateId: `a${j}` });
  });
}
await seed.backend.close();
const { backend, drop } = await openDuetime(kind, seed.namespace);
const { Session } = await import('node:inspector/promises');
const session = new Session();
session.connect();
if (process.env.PROFILE) {
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
}
let done = 0;
const d = new Dispatcher({ store: backend.store, concurrency, processor: async () => void done++ });
const ac = new AbortController();
const t0 = performance.now();
const cpu0 = process.cpuUsage();
const run = d.run(ac.signal);
while (done < count) await new Promise((r) => setTimeout(r, 5));
const ms = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
if (process.env.PROFILE) {
  const { profile } = await session.post('Profiler.stop');
  (await import('node:fs')).writeFileSync(process.env.PROFILE, JSON.stringify(profile));
}
ac.abort();
await run;
console.log(
  JSON.stringify({
    kind,
    concurrency,
    count,
    perSec: Math.round((count / ms) * 1000),
    cpuMsPerItem: ((cpu.user + cpu.system) / 1000 / count).toFixed(3),
    snap: d.snapshot(),
  }),
);
await backend.close();
await drop();
process.exit(0);
