import {
  type Changes,
  type Claimed,
  InvalidArgumentError,
  refuseTransactionControl,
  type Unit,
} from '@duetime/core';
import type pg from 'pg';
import type { CheckedOutClient, Connection, PostgresExecutor } from './connection.js';
import { sqlState } from './errors.js';
import type { Hosted } from './hosted.js';
import { type Lead, queryWithLead } from './leading.js';
import { Writer } from './writes.js';

/**
 * Every transaction starts at READ COMMITTED whatever the server's default, because that is the level
 * duetime's statements are written for; the application may still raise it with
 * `SET TRANSACTION ISOLATION LEVEL …` as the first statement on `tx.sql`.
 */
export const BEGIN = 'BEGIN ISOLATION LEVEL READ COMMITTED';
export const PART = 'duetime_part';
export const JOIN = 'duetime_join';
/** SQLSTATE of a statement sent in an aborted transaction, and of a savepoint outside any. */
export const IN_FAILED_TRANSACTION = '25P02';
export const NO_TRANSACTION = '25P01';
export const ABORTED =
  'a statement inside the part failed (an error caught inside the processor) and aborted the transaction';

/** A unit of work: a transaction on a connection of its own (or the application's), and its claims. */
export interface PostgresUnit extends Unit<pg.PoolClient> {
  readonly sql?: pg.PoolClient;
  readonly claimed?: readonly Claimed[];
  /** Who holds the claims (`claim_owner`). */
  readonly owner: string;
  /** The connection checked out for this unit (none for a joined one, or a claim that found nothing). */
  readonly out?: CheckedOutClient;
  /** The connection the unit's statements go to. */
  readonly client?: pg.ClientBase;
  readonly writer?: Writer;
  /** A unit on the application's transaction (`join`): ends with a savepoint, never with COMMIT. */
  readonly joined: boolean;
  /** A joined or hosted unit's executor: every statement, transaction control included, goes through it. */
  readonly exec?: PostgresExecutor;
  /** A unit on a transaction the application's library opened for it (the `transactions` option). */
  readonly hosted?: Hosted;
  /** Whether BEGIN went out (it waits for the first statement, so a transaction that only puts is one). */
  begun: boolean;
  /**
   * A joined unit: whether its savepoint went out. It waits for the first statement, and a join whose
   * writes are one statement takes none (see `commit`).
   */
  saved: boolean;
  /**
   * The processor part running now, when parts take their savepoint lazily (a client that reports its
   * transaction status): `saved` once its savepoint went out, ahead of its first statement.
   */
  part?: { saved: boolean };
  /** Whether a savepoint of an earlier part is still open: the next part's releases it, or COMMIT does. */
  held?: boolean;
  /** A failure of BEGIN queued ahead of the application's statements, reported by the commit. */
  failure?: unknown;
  ended: boolean;
}

/** Sends transaction control (several statements: the simple protocol, no parameters). */
export async function control(
  connection: Connection,
  unit: PostgresUnit,
  operation: string,
  text: string,
): Promise<pg.QueryResult> {
  connection.check();
  if (unit.exec) {
    // An executor runs one statement at a time.
    const exec = unit.exec;
    let last: pg.QueryResult | undefined;
    for (const statement of text.split('; '))
      last = (await connection.query(operation, statement, [], exec)) as unknown as pg.QueryResult;
    return last!;
  }
  try {
    const result = (await unit.client!.query(text)) as pg.QueryResult | pg.QueryResult[];
    return Array.isArray(result) ? result[result.length - 1]! : result;
  } catch (error) {
    throw connection.error(error, operation);
  }
}

/**
 * `tx.sql`: the unit's pg client, whose `query` refuses transaction control (BEGIN, COMMIT, ROLLBACK, …:
 * they would end duetime's transaction under it) and sends what the unit still owes ahead of a statement
 * (its BEGIN, a delivery part's savepoint: `beforeQuery`'s lead) in the statement's own round trip where
 * it can (see leading.ts), else as a query of its own just before it. Everything else is the client's own.
 */
export function guardSql(client: pg.ClientBase, beforeQuery: () => Lead | undefined): pg.ClientBase {
  const query = (...args: unknown[]) => {
    const first = args[0] as string | { text?: unknown } | undefined;
    const text = typeof first === 'string' ? first : first?.text;
    try {
      if (typeof text === 'string') refuseTransactionControl(text);
    } catch (error) {
      // Reported the way pg reports a failed query: to the callback, or as a rejected promise.
      const callback = args.at(-1);
      if (typeof callback !== 'function') return Promise.reject(error);
      queueMicrotask(() => (callback as (error: unknown) => void)(error));
      return undefined;
    }
    const lead = beforeQuery();
    if (lead) {
      const fused = queryWithLead(client, args, lead);
      if (fused.sent) return fused.result;
      client.query(lead.statements.join('; ')).catch((error: unknown) => lead.failed(error));
    }
    return (client.query as (...a: unknown[]) => unknown)(...args);
  };
  return new Proxy(client, {
    get(target, property) {
      if (property === 'query') return query;
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** Whether the changes are at most one statement: puts of distinct keys, no settlements. */
export function oneStatement(changes: Changes): boolean {
  if (changes.settlements.length > 0) return false;
  const steps = Writer.plan(changes.writes);
  return steps.length === 0 || (steps.length === 1 && 'keys' in steps[0]!);
}

/**
 * A joined handle's transaction state, known without a round trip: `T` inside a transaction, `I` outside
 * any, `E` in a failed one; undefined when the handle cannot tell. An executor tells through
 * `inTransaction()`; a node-postgres client through `getTransactionStatus()` (pg 8.12 and later).
 */
export function transactionStatus(handle: unknown): 'T' | 'I' | 'E' | undefined {
  const h = handle as { inTransaction?: unknown; getTransactionStatus?: unknown } | null | undefined;
  if (h === null || h === undefined) return undefined;
  if (typeof h.inTransaction === 'function') {
    const inside = (h.inTransaction as () => unknown).call(handle);
    return inside === true ? 'T' : inside === false ? 'I' : undefined;
  }
  if (typeof h.getTransactionStatus === 'function') {
    const status = (h.getTransactionStatus as () => unknown).call(handle);
    return status === 'T' || status === 'I' || status === 'E' ? status : undefined;
  }
  return undefined;
}

/**
 * A node-postgres client's transaction status when it is settled: the client has the server's ready
 * message for its last statement and nothing in flight (`readyForQuery`); undefined otherwise.
 */
export function settledStatus(client: pg.ClientBase | undefined): string | undefined {
  if ((client as { readyForQuery?: unknown } | undefined)?.readyForQuery !== true) return undefined;
  return transactionStatus(client);
}

export function refusal(state: string): InvalidArgumentError {
  return new InvalidArgumentError(
    'handle',
    '(transaction handle)',
    state === NO_TRANSACTION
      ? 'is not inside a transaction: begin one first (send BEGIN on a pg client)'
      : 'is inside a transaction that failed on an earlier statement',
  );
}

/**
 * The SQLSTATE of an error as the application's library reports it: node-postgres and postgres.js keep
 * it as `code`; TypeORM and Knex wrap the driver's error (`driverError`, `cause`).
 */
export function sqlStateOf(error: unknown): string | undefined {
  for (let e = error as Record<string, unknown> | undefined, depth = 0; e && depth < 4; depth++) {
    const state = sqlState(e) ?? e.code;
    if (typeof state === 'string' && /^[0-9A-Z]{5}$/.test(state)) return state;
    e = (e.driverError ?? e.cause ?? e.originalError) as Record<string, unknown> | undefined;
  }
  return undefined;
}
