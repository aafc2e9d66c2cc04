/**
 * The child process of the binding conformance group's kill test: `node worker.js <json WorkerArgs>`.
 * Opens the target from its module and a PostgreSQL backend on the group's schema, and runs a dispatcher
 * whose processor writes the schedule's row through the library, prints `IN_PROCESSOR <key>`, and waits
 * for the SIGKILL inside the delivery.
 */
import { createPostgresBackend } from '@duetime/backend-postgres';
import { Dispatcher } from '@duetime/core';
import type { WorkerArgs } from './kill.js';
import type { BindingTarget } from './types.js';

const args = JSON.parse(process.argv[2] ?? '{}') as WorkerArgs;
// Never outlive a parent that failed to kill this process.
setTimeout(() => process.exit(3), 120_000);

const exported = ((await import(args.module)) as Record<string, unknown>)[args.exportName] as
  | BindingTarget<unknown>
  | undefined;
if (typeof exported?.open !== 'function' || typeof exported.write !== 'function') {
  console.error(`${args.module} exports no binding target with open and write as ${args.exportName}`);
  process.exit(2);
}
const target = exported;
const library = await target.open({ url: args.url, schema: args.schema });
const backend = await createPostgresBackend(
  { connectionString: args.url },
  {
    schema: args.schema,
    poolSize: 2,
    claimTimeoutMs: args.claimTimeoutMs,
    ...(target.transactions ? { transactions: target.transactions(library) } : {}),
  },
);
const dispatcher = new Dispatcher({
  store: backend.store,
  rescanInterval: 50,
  processor: async (tx, _message, { schedule }) => {
    if (schedule.key !== args.key) return;
    await target.write!(library, tx.sql, schedule.key);
    process.stdout.write(`IN_PROCESSOR ${schedule.key}\n`);
    // Inside the delivery, after the write, before the commit: here the parent kills this process.
    await new Promise(() => {});
  },
});
void dispatcher.run();
