import { Dispatcher } from '@duetime/core';
import { effects } from '../store/fixtures.js';
import type { Role } from './index.js';

const number = (value: unknown): number | undefined => (typeof value === 'number' ? value : undefined);

/**
 * `dispatch`: runs a dispatcher whose processor records one `effect.applied` event per delivery on the
 * message's aggregate, with what the processor saw: `{ key, version, pid, attempts, lastError }` (the
 * schedule's failed attempts before this one, and the last one's error, or null).
 *
 * Arguments:
 * - `hang: true`: prints `IN_PROCESSOR <key>` from inside the first processor, after staging its writes,
 *   and never returns, so the parent can SIGKILL it mid-transaction; `hangAt: n` does so in the n-th
 *   processor it runs instead (the middle of a batch, with `batchSize` above n).
 * - `poison: <key>`: the processor of that key SIGKILLs its own process, every time it runs (a message
 *   that crashes its worker: out of memory, a native crash, a `process.exit` deep in a library), after
 *   printing `POISONED <key> <failed attempts before this one>`.
 * - `concurrency`, `maxAttempts`, `retryDelay` (ms, default 50), `batchSize` (then `batchDuration` is
 *   600,000 ms unless given, so a batch runs every schedule it claimed), `batchDuration`, `pipeline`.
 * - `events: true`: prints `FAILED <key> <attempt> <error name>` and `DEAD <key> <attempts> <error name>`
 *   for the dispatcher's `failed` and `deadLettered` events.
 */
const dispatch: Role = async ({ backend, args, signal }) => {
  const hangAt = args.hang === true ? 1 : (number(args.hangAt) ?? 0);
  const poison = typeof args.poison === 'string' ? args.poison : undefined;
  const batchSize = number(args.batchSize);
  const batchDuration = number(args.batchDuration) ?? (batchSize === undefined ? undefined : 600_000);
  const maxAttempts = number(args.maxAttempts);
  let runs = 0;
  const dispatcher = new Dispatcher({
    store: backend.store,
    concurrency: number(args.concurrency) ?? 1,
    ...(batchSize !== undefined ? { batchSize } : {}),
    ...(batchDuration !== undefined ? { batchDuration } : {}),
    ...(maxAttempts !== undefined ? { maxAttempts } : {}),
    ...(args.pipeline === true ? { pipeline: true } : {}),
    rescanInterval: 100,
    retryDelay: number(args.retryDelay) ?? 50,
    processor: async (tx, message, { schedule }) => {
      if (schedule.key === poison) {
        // Written synchronously (stdout is a pipe): the parent reads which attempt each crash was.
        console.log(`POISONED ${schedule.key} ${schedule.attempts}`);
        process.kill(process.pid, 'SIGKILL');
        await new Promise(() => {});
      }
      await tx.exec(effects, message.aggregateId!, (_state, ag) =>
        ag.raise('effect.applied', {
          key: schedule.key,
          version: schedule.version,
          pid: process.pid,
          attempts: schedule.attempts,
          lastError: schedule.lastError ?? null,
        }),
      );
      if (++runs === hangAt) {
        console.log(`IN_PROCESSOR ${schedule.key}`);
        await new Promise(() => {});
      }
    },
  });
  if (args.events === true) {
    const name = (error: unknown) => (error instanceof Error ? error.name : typeof error);
    dispatcher.on('failed', (e) => console.log(`FAILED ${e.schedule.key} ${e.attempt} ${name(e.error)}`));
    dispatcher.on('deadLettered', (e) =>
      console.log(`DEAD ${e.schedule.key} ${e.attempts} ${name(e.error)}`),
    );
  }
  const done = dispatcher.run(signal);
  console.log('READY');
  await done;
};

export const storeRoles: Record<string, Role> = { dispatch };
