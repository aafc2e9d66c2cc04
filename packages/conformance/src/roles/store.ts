import { Dispatcher } from '@duetime/core';
import { effects } from '../store/fixtures.js';
import type { Role } from './index.js';

/**
 * `dispatch`: runs a dispatcher whose processor records one `effect.applied` event per delivery on the
 * message's aggregate. With `hang: true` it prints `IN_PROCESSOR <key>` from inside the processor, after
 * staging its writes, and never returns, so the parent can SIGKILL it mid-transaction.
 */
const dispatch: Role = async ({ backend, args, signal }) => {
  const hang = args.hang === true;
  const dispatcher = new Dispatcher({
    store: backend.store,
    concurrency: typeof args.concurrency === 'number' ? args.concurrency : 1,
    rescanInterval: 100,
    retryDelay: 50,
    processor: async (tx, message, { schedule }) => {
      await tx.exec(effects, message.aggregateId, (_state, ag) =>
        ag.raise('effect.applied', { key: schedule.key, version: schedule.version, pid: process.pid }),
      );
      if (hang) {
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
