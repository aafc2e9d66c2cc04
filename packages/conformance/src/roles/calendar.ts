import { every, type Handler, Registry, type ScheduleOptions, Scheduler } from '@duetime/core';
import { isLeaderKey, Partition, recordRun } from '../calendar/fixtures.js';
import type { Role } from './index.js';

const number = (value: unknown, fallback: number): number => (typeof value === 'number' ? value : fallback);
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * `calendar`: a replica running a Scheduler (group `conformance`) with one declaration, `tick`, every
 * `every` ms; each run is recorded durably in the backend's store before `RAN <occurrence> <ms>` is
 * printed. It prints `READY`, `LEADER <epoch> <now>` / `FOLLOWER <now>` as leadership changes, and
 * `RECORD <state>[/<reason>] <occurrence> <intendedMs> <now>` for every finished record.
 *
 * With `hangAt: n`, its n-th run does not record: once every earlier run's cursor is persisted it
 * prints `HANGING <occurrence> <ms>` and hangs (for `holdMs`, then prints `RELEASED <now>`; forever
 * without). `drainWhenHanging` makes it stop admitting at that moment (so a SIGKILL finds nothing else
 * half done); `loseLeadershipWhenHanging` cuts it off from its leadership lease only (the overlap lease
 * is still renewed), so it loses leadership while the handler keeps running.
 */
const calendar: Role = async ({ backend, args, signal }) => {
  const period = number(args.every, 500);
  const name = typeof args.name === 'string' ? args.name : String(process.pid);
  const hangAt = typeof args.hangAt === 'number' ? args.hangAt : undefined;
  const partition = new Partition(backend.leases, backend.cursors);
  let runs = 0;
  let scheduler!: Scheduler;

  const persistedThrough = () =>
    scheduler.snapshot().schedules[0]?.cursor?.getTime() ?? Number.NEGATIVE_INFINITY;
  const handler: Handler = async ({ invocation }) => {
    runs++;
    const at = invocation.intendedAt.getTime();
    if (runs === hangAt) {
      // Stop admitting first, so that nothing after this occurrence starts; then wait until every
      // earlier run's cursor is durable, so a SIGKILL from now on finds no finished run unrecorded.
      if (args.drainWhenHanging === true) void scheduler.drain();
      const deadline = Date.now() + 10_000;
      while (persistedThrough() < at - period && Date.now() < deadline) await sleep(5);
      if (args.loseLeadershipWhenHanging === true) partition.cut(isLeaderKey);
      console.log(`HANGING ${invocation.occurrence} ${at}`);
      if (typeof args.holdMs !== 'number') await new Promise(() => {});
      await sleep(args.holdMs as number);
      console.log(`RELEASED ${Date.now()}`);
      return;
    }
    await recordRun(backend.store, invocation, name);
    console.log(`RAN ${invocation.occurrence} ${at}`);
  };

  const options: ScheduleOptions = {};
  if (args.catchUp === true) options.catchUp = { window: 60_000, max: 1000 };
  if (args.withoutOverlap === true) {
    options.withoutOverlap = true;
    options.overlapTTL = number(args.overlapTTL, 1500);
  }
  scheduler = new Scheduler({
    registry: new Registry(every('tick', period, handler).with(options)),
    leases: partition,
    cursors: partition,
    group: 'conformance',
    leadershipTTL: number(args.leadershipTTL, 1500),
    pollInterval: number(args.pollInterval, 250),
    grace: number(args.grace, 1000),
    drainTimeout: number(args.drainTimeout, 60_000),
  });
  const done = scheduler.run(signal);
  console.log('READY');

  let leader = false;
  const printed = new Set<number>();
  const watch = setInterval(() => {
    const snapshot = scheduler.snapshot();
    if (snapshot.leader !== leader) {
      leader = snapshot.leader;
      console.log(leader ? `LEADER ${snapshot.epoch} ${Date.now()}` : `FOLLOWER ${Date.now()}`);
    }
    for (const record of snapshot.history) {
      if (record.state === 'running' || printed.has(record.seq)) continue;
      printed.add(record.seq);
      const outcome = record.reason ? `${record.state}/${record.reason}` : record.state;
      console.log(
        `RECORD ${outcome} ${record.occurrence || '-'} ${record.intendedAt.getTime()} ${Date.now()}`,
      );
    }
  }, 10);
  try {
    await done;
  } finally {
    clearInterval(watch);
  }
};

export const calendarRoles: Record<string, Role> = { calendar };
