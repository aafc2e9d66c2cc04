import { BackendError, CorruptDataError, DuetimeError } from '@duetime/core';

/** The SQLite result code of a better-sqlite3 error (`SQLITE_BUSY`, `SQLITE_CONSTRAINT_PRIMARYKEY`…), if any. */
export function sqliteCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_') ? code : undefined;
}

/** Whether the error says another connection holds the lock we asked for. */
export function isBusy(error: unknown): boolean {
  const code = sqliteCode(error);
  return code !== undefined && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/**
 * Turns a driver error into a duetime error naming what was being done to which file. Deliberate duetime
 * errors pass through unchanged.
 *
 * - `SQLITE_NOTADB`, `SQLITE_CORRUPT*`: {@link CorruptDataError} (the file is not a healthy database).
 * - `SQLITE_BUSY*`, `SQLITE_LOCKED*`, `SQLITE_IOERR*`, `SQLITE_FULL`, `SQLITE_NOMEM`, `SQLITE_PROTOCOL`:
 *   a transient {@link BackendError} (trying again later may work).
 * - anything else: a permanent {@link BackendError}.
 */
export function mapSqliteError(operation: string, file: string, error: unknown): Error {
  if (error instanceof DuetimeError) return error;
  const code = sqliteCode(error);
  const message = error instanceof Error ? error.message : String(error);
  const where = `${operation} (${file})`;
  if (code === 'SQLITE_NOTADB' || code?.startsWith('SQLITE_CORRUPT'))
    return new CorruptDataError(
      `${file} is not a healthy SQLite database (${code}: ${message}) during ${operation}`,
      {
        cause: error,
      },
    );
  const transient =
    code !== undefined &&
    (code.startsWith('SQLITE_BUSY') ||
      code.startsWith('SQLITE_LOCKED') ||
      code.startsWith('SQLITE_IOERR') ||
      code === 'SQLITE_FULL' ||
      code === 'SQLITE_NOMEM' ||
      code === 'SQLITE_PROTOCOL');
  return new BackendError(where, code ? `${code}: ${message}` : message, { transient, cause: error });
}
