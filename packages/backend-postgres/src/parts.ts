import { BackendError } from '@duetime/core';
import type { Connection } from './connection.js';
import {
  ABORTED,
  control,
  IN_FAILED_TRANSACTION,
  PART,
  type PostgresUnit,
  settledStatus,
  sqlStateOf,
  transactionStatus,
} from './unit.js';

// Delivery parts: each processor of a delivery batch runs under a savepoint of the batch's transaction,
// so its failure undoes only its own statements.

/**
 * The statements that take the running part's savepoint, releasing an earlier part's first; from here
 * on the part counts as saved. The caller sends them ahead of the part's first statement (see
 * leading.ts), or on their own with {@link partSavepoint}.
 */
export function partStatements(unit: PostgresUnit): string[] {
  unit.part!.saved = true;
  const statements = unit.held ? [`RELEASE SAVEPOINT ${PART}`, `SAVEPOINT ${PART}`] : [`SAVEPOINT ${PART}`];
  unit.held = true;
  return statements;
}

/** Takes the running part's savepoint now, in a round trip of its own (one simple query). */
export function partSavepoint(unit: PostgresUnit): Promise<unknown> {
  return unit.client!.query(partStatements(unit).join('; '));
}

/**
 * Runs one processor under a savepoint. On a client that reports its transaction status (node-postgres
 * 8.21 and later) the savepoint waits for the part's first statement, a part that sends none takes
 * none, and a part that ends well is not released on its own: the next part's savepoint releases it
 * in the same round trip, or COMMIT does. Whether it ended well is the client's status, `T`, read
 * without a round trip when the client is settled; otherwise (a failed statement whose error the
 * processor caught, a statement still in flight) the savepoint is released as before, and a failed
 * part rolled back to it.
 */
export async function runPart<T>(
  connection: Connection,
  unit: PostgresUnit,
  fn: () => Promise<T>,
): Promise<T> {
  const status = transactionStatus(unit.client);
  if (status === undefined) return eagerPart(connection, unit, fn);
  const part = { saved: false };
  unit.part = part;
  let result: T;
  try {
    result = await fn();
  } catch (error) {
    unit.part = undefined;
    if (part.saved) await undoPart(connection, unit);
    throw error;
  }
  unit.part = undefined;
  if (!part.saved) return result;
  // Known good only when the client has its answer to every statement (the status comes with the
  // server's ready message, which may arrive after an error the processor already caught): otherwise
  // the savepoint is released the old way, whose failure tells.
  if (settledStatus(unit.client) === 'T') return result;
  unit.held = false;
  await releasePart(connection, unit);
  return result;
}

/** Releases the part's savepoint; a part whose statement failed is rolled back to it and refused. */
async function releasePart(connection: Connection, unit: PostgresUnit): Promise<void> {
  try {
    await control(connection, unit, 'end a delivery part', `RELEASE SAVEPOINT ${PART}`);
  } catch (error) {
    if (sqlStateOf(error) !== IN_FAILED_TRANSACTION) throw connection.error(error, 'end a delivery part');
    await undoPart(connection, unit);
    throw new BackendError('end a delivery part', ABORTED, { cause: error });
  }
}

async function undoPart(connection: Connection, unit: PostgresUnit): Promise<void> {
  unit.held = false;
  await control(
    connection,
    unit,
    'undo a delivery part',
    `ROLLBACK TO SAVEPOINT ${PART}; RELEASE SAVEPOINT ${PART}`,
  );
}

/** A part on a client that cannot report its transaction status: a savepoint taken and released around it. */
async function eagerPart<T>(connection: Connection, unit: PostgresUnit, fn: () => Promise<T>): Promise<T> {
  await control(connection, unit, 'start a delivery part', `SAVEPOINT ${PART}`);
  let result: T;
  try {
    result = await fn();
  } catch (error) {
    await undoPart(connection, unit);
    throw error;
  }
  await releasePart(connection, unit);
  return result;
}
