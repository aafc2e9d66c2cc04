import { bindingConformance } from '@duetime/bindings/conformance';
import { PGlite } from '@electric-sql/pglite';
import { afterAll } from 'vitest';
import {
  drizzlePgliteTarget,
  knexPgliteTarget,
  kyselyPgliteTarget,
  pgliteTarget,
  pgliteTransactionsTarget,
} from './targets/pglite.js';

// The binding conformance group on PGlite (PostgreSQL in this process): one database for the file, a
// schema per target.
let database: Promise<PGlite> | undefined;
const pglite = () => {
  database ??= PGlite.create();
  return database;
};

for (const target of [
  pgliteTarget,
  pgliteTransactionsTarget,
  drizzlePgliteTarget,
  kyselyPgliteTarget,
  knexPgliteTarget,
])
  bindingConformance(target as never, { pglite });

afterAll(async () => {
  await (await database)?.close();
});
