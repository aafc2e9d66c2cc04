/**
 * The binding conformance group: what every binding between duetime and a SQL library must do, as vitest
 * tests against a real PostgreSQL server. This package's bindings run it for each library; run it against
 * a binding of your own the same way:
 *
 * ```ts
 * // my-binding.ts: the target (a module: the kill test imports it in a child process)
 * export const target: BindingTarget<MyDb> = {
 *   name: 'my library',
 *   open: async ({ url, schema }) => connect(url, { schema }),
 *   close: (db) => db.close(),
 *   transaction: (db, fn) => db.transaction((trx) => fn(fromMyLibrary(trx), trx)),
 *   write: (db, sql, key) => onClient(db, sql).insert('effects', { key, via: 'mine' }),
 * };
 * // my-binding.test.ts
 * bindingConformance(target, { module: new URL('./my-binding.ts', import.meta.url) });
 * ```
 *
 * Importing this module loads vitest: it is for test files only.
 */
import { afterAll, beforeAll, describe } from 'vitest';
import { executorTests, joinTests } from './join.js';
import { killTests } from './kill.js';
import { processorTests } from './processor.js';
import { closeServer, openServer, schemaFor, serverUrl } from './server.js';
import type { BindingConformanceOptions, BindingTarget, GroupContext } from './types.js';

export { KILLED_CLAIM_TIMEOUT_MS } from './kill.js';
export type { BindingConformanceOptions, BindingServer, BindingTarget } from './types.js';

/**
 * Registers the binding conformance group for `target` as vitest tests; call it at the top level of a
 * test file. Before the tests it opens a PostgreSQL backend in a schema of its own (dropped after them),
 * creates the group's tables there (see {@link BindingServer}) and opens the target; the cases run one
 * after another.
 *
 * Join direction (when the target has `transaction`): the executor contract (parameters, rows, counts,
 * `$` that is not a parameter, rollback, savepoints, refusals), and `store.join` in the library's
 * transaction: commit (visible after, not before, and delivered), rollback by a thrown error, by the
 * library's explicit rollback and by a failed statement (nothing committed), cancel and replace, and a
 * recurring schedule armed through the binding.
 *
 * Processor direction (when the target has `write`): writes through the library commit with the
 * consumption; in a batch, a throwing processor rolls back only its own writes and is retried while the
 * others commit; the library's own transactions stay inside the delivery; a child process SIGKILLed
 * inside the processor, after its write, commits nothing, and the schedule is delivered again and its row
 * written exactly once.
 */
export function bindingConformance<L>(
  target: BindingTarget<L>,
  options: BindingConformanceOptions = {},
): void {
  if (!target.transaction && !target.write)
    throw new Error(`bindingConformance(${target.name}): the target has neither transaction nor write`);
  const server = { schema: schemaFor(target.name) } as GroupContext['server'];
  const context: GroupContext = { target: target as BindingTarget<unknown>, options, server };
  describe(`binding conformance: ${target.name}`, () => {
    beforeAll(async () => {
      server.url = options.pglite ? 'pglite:' : serverUrl(options);
      await openServer(server, context.target, options);
    });
    afterAll(() => closeServer(server, context.target));
    if (target.transaction) {
      describe('executor', () => executorTests(context));
      describe('store.join in the library’s transaction', () => joinTests(context));
    }
    if (target.write)
      describe('processors writing through the library', () => {
        processorTests(context);
        // A child process cannot share a PGlite database.
        if (!options.pglite) killTests(context);
      });
  });
}
