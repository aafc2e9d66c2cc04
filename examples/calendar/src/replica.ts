/**
 * One replica of the service: opens the SQLite file, runs the calendar with a Scheduler and prints what
 * happens as single lines (`READY`, `LEADER <epoch>`, `TICK …`, `SKIPPED <schedule> <reason> <at>`).
 *
 *   node --import tsx --conditions=source src/replica.ts <sqlite-file> <name>
 *
 * SIGTERM drains it (running handlers finish, leadership is released).
 */
import { pathToFileURL } from 'node:url';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { Scheduler } from '@duetime/core';
import { declarations } from './declarations.js';

/** Short timings so that the demo's failover takes a couple of seconds (defaults: 10 s and 1 s). */
export const DEMO_TIMINGS = { leadershipTTL: 2000, pollInterval: 250, grace: 1000 } as const;

export async function runReplica(file: string, name: string, signal: AbortSignal): Promise<void> {
  const backend = await createSqliteBackend({ filename: file });
  const print = (line: string) => console.log(line);
  const scheduler = new Scheduler({
    registry: declarations(backend.store, name, print),
    backend,
    group: 'calendar-example',
    ...DEMO_TIMINGS,
    drainTimeout: 5000,
  });
  const done = scheduler.run(signal);
  print('READY');
  let leader = false;
  const printed = new Set<number>();
  const watch = setInterval(() => {
    const snapshot = scheduler.snapshot();
    if (snapshot.leader !== leader) {
      leader = snapshot.leader;
      print(leader ? `LEADER ${snapshot.epoch}` : 'FOLLOWER');
    }
    for (const record of snapshot.history) {
      if (record.state !== 'skipped' || printed.has(record.seq)) continue;
      printed.add(record.seq);
      print(`SKIPPED ${record.schedule} ${record.reason} ${record.intendedAt.getTime()}`);
    }
  }, 20);
  try {
    await done;
  } finally {
    clearInterval(watch);
    await backend.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [file, name] = process.argv.slice(2);
  if (!file || !name) {
    console.error('usage: replica.ts <sqlite-file> <name>');
    process.exit(2);
  }
  const controller = new AbortController();
  process.once('SIGTERM', () => controller.abort());
  process.once('SIGINT', () => controller.abort());
  await runReplica(file, name, controller.signal);
}
