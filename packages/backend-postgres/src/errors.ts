import { BackendError, ConflictError, DuetimeError } from '@duetime/core';
import pg from 'pg';

/** What a backend connects to, for error messages. Never holds the password. */
export interface ConnectionTarget {
  host: string;
  port: number;
  database: string;
  user: string;
  schema: string;
}

/** `user "app" at db.internal:5432, database "shop", schema "duetime"`. */
export function describeTarget(target: ConnectionTarget): string {
  return `user ${JSON.stringify(target.user)} at ${target.host}:${target.port}, database ${JSON.stringify(
    target.database,
  )}, schema ${JSON.stringify(target.schema)}`;
}

// SQLSTATE classes and codes (https://www.postgresql.org/docs/15/errcodes-appendix.html).
const SERIALIZATION_FAILURE = '40001';
const DEADLOCK_DETECTED = '40P01';
/**
 * The server or the connection went away, or is not accepting work yet: retrying later may succeed.
 * admin_shutdown, crash_shutdown, cannot_connect_now, idle_session_timeout,
 * idle_in_transaction_session_timeout, too_many_connections, configuration_limit_exceeded,
 * query_canceled, lock_not_available, system_error, io_error.
 */
const TRANSIENT_CODES = new Set(
  '57P01 57P02 57P03 57P05 25P03 53300 53400 57014 55P03 58000 58030'.split(' '),
);
const NODE_TRANSIENT = new Set(
  'ECONNREFUSED ECONNRESET ECONNABORTED ETIMEDOUT EPIPE EHOSTUNREACH ENETUNREACH ENETDOWN EAI_AGAIN ENOTFOUND'.split(
    ' ',
  ),
);
/** Messages pg uses for a socket that closed or never opened (these errors carry no code). */
const CONNECTION_MESSAGES =
  /Connection terminated|connection timeout|timeout exceeded when trying to connect|not queryable|Client was closed|Connection closed/i;

/** The SQLSTATE of a server error, if `error` is one. */
export function sqlState(error: unknown): string | undefined {
  return error instanceof pg.DatabaseError ? error.code : undefined;
}

/** Server errors that end (or refuse) the session: the connection is gone, a fresh one may work. */
const SESSION_ENDED = new Set(['57P01', '57P02', '57P03', '53300']);

/**
 * Whether the connection itself is gone (or could not be made): what a retry on a fresh connection can
 * cure. Narrower than {@link isConnectionError}, which also counts timeouts and overload as transient.
 */
export function isConnectionLost(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const state = sqlState(error);
  if (state !== undefined) return state.startsWith('08') || SESSION_ENDED.has(state);
  return isConnectionError(error);
}

/** Whether `error` is transient: the connection or the server went away, is starting, stopping or overloaded. */
export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const state = sqlState(error);
  if (state !== undefined) return state.startsWith('08') || TRANSIENT_CODES.has(state);
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && NODE_TRANSIENT.has(code)) return true;
  return CONNECTION_MESSAGES.test(error.message);
}

/**
 * Turns whatever pg threw into a duetime error: serialization failures and deadlocks become
 * `ConflictError('serialization')` (core re-runs the transaction); lost connections and a server that is
 * starting, stopping or overloaded become a transient {@link BackendError}; everything else a permanent
 * one. Every message names the operation and what was tried (host, port, database, schema, user), never
 * the password.
 */
export function toDuetimeError(
  error: unknown,
  operation: string,
  target: ConnectionTarget,
  secret?: string,
): DuetimeError {
  if (error instanceof DuetimeError) return error;
  const state = sqlState(error);
  if (state === SERIALIZATION_FAILURE || state === DEADLOCK_DETECTED) {
    return new ConflictError(
      'serialization',
      operation,
      `${operation}: ${state === DEADLOCK_DETECTED ? 'deadlock detected' : 'serialization failure'}; the transaction is re-run`,
      { cause: error },
    );
  }
  const raw = error instanceof Error ? error.message : String(error);
  const message = scrub(explain(raw, state, error, target), secret);
  return new BackendError(
    operation,
    `${message}${state ? ` [SQLSTATE ${state}]` : ''} (tried ${describeTarget(target)})`,
    { cause: error, transient: isConnectionError(error) },
  );
}

/** Adds what a reader needs to fix the usual failures to pg's terse messages. */
function explain(raw: string, state: string | undefined, error: unknown, target: ConnectionTarget): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === 'ECONNREFUSED')
    return `connection refused: no PostgreSQL server listens at ${target.host}:${target.port}`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return `host ${JSON.stringify(target.host)} not found (${raw})`;
  if (/connection timeout|timeout exceeded when trying to connect/i.test(raw))
    return `no connection within the connection timeout (${raw})`;
  switch (state) {
    case '28P01':
    case '28000':
      return `authentication failed: ${raw}`;
    case '42501':
      return `permission denied: ${raw}; the user needs to own schema ${JSON.stringify(target.schema)} or be granted USAGE and CREATE on it, or an administrator runs migrate() and grants access`;
    case '3F000':
    case '42P01':
      return `${raw}; schema ${JSON.stringify(target.schema)} is not migrated (run migrate() or open the backend with migrate: true)`;
    default:
      return raw;
  }
}

function scrub(text: string, secret: string | undefined): string {
  return secret ? text.split(secret).join('***') : text;
}
