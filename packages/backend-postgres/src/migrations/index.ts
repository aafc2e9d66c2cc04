import schedulesAndEvents from './0001-schedules-and-events.js';
import leasesAndCursors from './0002-leases-and-cursors.js';
import recurrenceAndDeadLetters from './0003-recurrence-and-dead-letters.js';
import claims from './0004-claims.js';
import sqlFunctions from './0005-sql-functions.js';
import putFunction from './0006-put-function.js';
import putOneFunction from './0007-put-one-function.js';

/** One schema change. `sql` uses `:SCHEMA` where the quoted schema name goes. */
export interface Migration {
  id: number;
  name: string;
  sql: string;
}

/**
 * Every migration, in order. Compiled into the package (no file is read at run time). Append only: a
 * released migration never changes; a new one gets the next number.
 */
export const migrations: readonly Migration[] = [
  schedulesAndEvents,
  leasesAndCursors,
  recurrenceAndDeadLetters,
  claims,
  sqlFunctions,
  putFunction,
  putOneFunction,
];

/** The schema version this package creates and understands. */
export const SCHEMA_VERSION: number = migrations.length;
