import {
  type Backend,
  Dispatcher,
  every,
  type Handler,
  isTransient,
  Registry,
  Scheduler,
  storeTarget,
} from '@duetime/core';
import { recordDelivery, tickMessage } from './effects.js';
import { claimEpoch, FencedError, recordFenced } from './fence.js';
import { Random } from './random.js';
import { openTarget, type TargetSpec } from './targets.js';

/** A role gets the parent's JSON arguments and a signal aborted on SIGTERM (then it drains). */
export type Role = (args: Record<string, unknown>, signal: AbortSignal) => Promise<void>;

/** Scope of the crash loop's calendar, so the parent derives the same occurrence ids. */
export const CHAOS_SCOPE = { namespace: 'rel', environment: 'production', group: 'chaos' } as const;
export const CHAOS_SCHEDULE = 'tick';
/** Where the crash loop's scheduler keeps its cursor (the Scheduler's key layout). */
export const CHAOS_CURSOR_KEY = `${CHAOS_SCOPE.namespace}/calendar/${CHAOS_SCOPE.environment}/${CHAOS_SCOPE.group}/cursor/${CHAOS_SCHEDULE}`;
export const FENCED_SCOPE = { namespace: 'rel', environment: 'production', group: 'fenced' } as const;

const number = (value: unknown, fallback: number): number => (typeof value === 'number' ? value : fallback);
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });

/**
 * Prints `LEADER <epoch> <ms>` / `FOLLOWER <ms>` whenever the scheduler's leadership changes, and
 * `RECORD <state>/<reason> <intended ms> <count>` for every finished record that did not succeed (the
 * parent shows them when an audit fails).
 */
function watchScheduler(scheduler: Scheduler): () => void {
  let leader = false;
  const printed = new Set<number>();
  const timer = setInterval(() => {
    const snapshot = scheduler.snapshot();
    if (snapshot.leader !== leader) {
      leader = snapshot.leader;
      console.log(leader ? `LEADER ${snapshot.epoch} ${Date.now()}` : `FOLLOWER ${Date.now()}`);
    }
    for (const record of snapshot.history) {
      if (record.state === 'running' || printed.has(record.seq)) continue;
      printed.add(record.seq);
      if (record.state !== 'succeeded')
        console.log(
          `RECORD ${record.state}/${record.reason ?? '-'} ${record.intendedAt.getTime()} ${record.count ?? 1} ${Date.now()}`,
        );
    }
  }, 10);
  return () => clearInterval(timer);
}

/**
 * Opens the target, retrying transient failures for up to a minute, as a service restarted by its
 * supervisor would: a process started while a cluster fails over may find no master for a while.
 */
async function openWithRetry(target: TargetSpec): Promise<Backend> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      return await openTarget(target);
    } catch (error) {
      if (!isTransient(error) || Date.now() > deadline) throw error;
      console.error(`opening the backend failed, retrying: ${String(error)}`);
      await sleep(250);
    }
  }
}

/**
 * `chaos`: what the crash loop kills. A dispatcher whose processor records each delivery durably (an
 * event, and on SQL backends a row, committed with the consumption; then a short random pause so that
 * kills land inside open transactions), and a scheduler with an `every` declaration whose handler is a
 * `storeTarget`: each occurrence becomes one durable message, which the dispatchers deliver as above.
 */
const chaos: Role = async (args, signal) => {
  const target = args.target as TargetSpec;
  const random = new Random(number(args.seed, 1));
  const backend: Backend = await openWithRetry(target);
  const dispatcher = new Dispatcher({
    store: backend.store,
    concurrency: number(args.concurrency, 2),
    rescanInterval: 250,
    retryDelay: 50,
    processor: async (tx, message, { schedule }) => {
      await recordDelivery(tx, message, schedule, target);
      const pause = random.int(0, 12);
      if (pause > 0) await sleep(pause);
    },
  });
  const tick: Handler = storeTarget(backend.store, (invocation) =>
    tickMessage(invocation.occurrence, invocation.intendedAt.getTime()),
  );
  const scheduler = new Scheduler({
    registry: new Registry(
      every(CHAOS_SCHEDULE, number(args.period, 250), tick).with({
        catchUp: { window: 3_600_000, max: 100_000 },
      }),
    ),
    backend,
    ...CHAOS_SCOPE,
    leadershipTTL: number(args.leadershipTTL, 1500),
    pollInterval: 100,
    grace: 1000,
    // A leader taking over after many kills catches up hundreds of occurrences at once: they wait for a
    // slot rather than being skipped as `capacity_reached` after the default 5 s.
    capacityWait: 600_000,
    drainTimeout: 10_000,
  });
  const dispatched = dispatcher.run(signal);
  const scheduled = scheduler.run(signal);
  const unwatch = watchScheduler(scheduler);
  console.log('READY');
  try {
    await Promise.all([dispatched, scheduled]);
  } finally {
    unwatch();
  }
  await backend.close();
};

/**
 * `fenced`: a replica for the pause test. Its declaration `beat` runs every `period` ms. Each run prints
 * `START <occurrence> <epoch> <ms>`, claims its leadership epoch in the store (`CLAIMED …`; from then on no
 * older epoch can write), holds for `hold` ms, and records the occurrence through the fence: `RECORDED`,
 * `ALREADY` (an earlier run recorded it), `FENCED` (a newer epoch has claimed the store) or `FAILED <code>`
 * (the write failed: the server ended a frozen session). The write is attempted even after an abort, to
 * show that the fence holds on its own; a fenced or failed run then waits for its signal, which must abort
 * since another leader exists, and prints `ABORTED <occurrence> <code> <reason>`.
 */
const fenced: Role = async (args, signal) => {
  const target = args.target as TargetSpec;
  const name = typeof args.name === 'string' ? args.name : String(process.pid);
  const backend: Backend = await openTarget(target);
  const hold = number(args.hold, 1000);
  const beat: Handler = async ({ signal: runSignal, invocation }) => {
    // The fencing token of the epoch that admitted this run (not whatever this replica leads in now).
    const epoch = invocation.epoch ?? -1;
    const occurrence = invocation.occurrence;
    const say = (what: string) => console.log(`${what} ${occurrence} ${epoch} ${Date.now()}`);
    say('START');
    let refused: unknown;
    try {
      await claimEpoch(backend.store, epoch);
      say('CLAIMED');
      await sleep(hold, runSignal);
      say(
        await recordFenced(backend.store, {
          occurrence,
          at: invocation.intendedAt.getTime(),
          epoch,
          runner: name,
        }),
      );
    } catch (error) {
      if (error instanceof FencedError) say('FENCED');
      else {
        // On PostgreSQL the server ends the session of a leader frozen inside a transaction: its write
        // fails instead of committing late.
        refused = error;
        say(`FAILED ${(error as { code?: string }).code ?? '-'}`);
      }
      if (!runSignal.aborted) await sleep(30_000, runSignal);
    }
    if (runSignal.aborted) {
      const reason = runSignal.reason as { code?: string; reason?: string } | undefined;
      say(`ABORTED ${reason?.code ?? '-'} ${reason?.reason ?? '-'}`);
    } else if (refused !== undefined) throw refused;
  };
  const scheduler = new Scheduler({
    registry: new Registry(
      every('beat', number(args.period, 300), beat).with({ catchUp: { window: 60_000, max: 1000 } }),
    ),
    backend,
    ...FENCED_SCOPE,
    owner: name,
    leadershipTTL: number(args.leadershipTTL, 1500),
    pollInterval: 50,
    grace: 3000,
    drainTimeout: 5000,
  });
  const done = scheduler.run(signal);
  const unwatch = watchScheduler(scheduler);
  console.log('READY');
  try {
    await done;
  } finally {
    unwatch();
  }
  await backend.close();
};

export const roles: Record<string, Role> = { chaos, fenced };
