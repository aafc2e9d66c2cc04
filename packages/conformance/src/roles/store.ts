import { Dispatcher } from '@duetime/core';
import { effects } from '../store/fixtures.js';
import type { Role } from './index.js';

/**
 * `dispatch`: runs a dispatcher whose processor records one `effect.applied` event per delivery on the
 * message's aggregate. With `hang: true` it prints `IN_PROCESSOR <key>` from inside the processor, after
 * staging its writes, and never returns, so the parent can SIGKILL it mid-transaction; `hangAt: n` does so
 * in the n-th processor it runs instead (the middle of a batch, with `batchSize` above n).
 */
const dispatch: Role = async ({ backend, args, signal }) => {
  const hangAt = args.hang === true ? 1 : typeof args.hangAt === 'number' ? args.hangAt : 0;
  let runs = 0;
  const dispatcher = new Dispatcher({
    store: backend.store,
    concurrency: typeof args.concurrency === 'number' ? args.concurrency : 1,
    ...(typeof args.batchSize === 'number' ? { batchSize: args.batchSize, batchDuration: 600_000 } : {}),
    rescanInterval: 100,
    retryDelay: 50,
    processor: async (tx, message, { schedule }) => {
      await tx.exec(effects, message.aggregateId!, (_state, ag) =>
        ag.raise('effect.applied', { key: schedule.key, version: schedule.version, pid: process.pid }),
      );
      if (++runs === hangAt) {
        console.log(`IN_PROCESSOR ${schedule.key}`);
        await new Promise(() => {});
      }
    },
  });
  const done = dispatcher.run(signal);
  console.log('READY');
  await done;
};

export const storeRoles: Record<string, Role> = { dispatch };
