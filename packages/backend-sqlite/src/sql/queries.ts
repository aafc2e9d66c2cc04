import type { Tables } from './tables.js';

/** Every statement of the store, by name. Table names come from a validated prefix; values are bound. */
export function storeQueries(t: Tables) {
  const columns = 'key, at, due_at, version, attempts, message, last_error, recurrence';
  const deadColumns = 'key, version, at, message, attempts, error, dead_at';
  return {
    loadSchedule: `SELECT ${columns} FROM ${t.schedules} WHERE key = ?`,
    /** Uses the (due_at, key) index: a range scan of the first `limit` entries. */
    dueSchedules: `SELECT ${columns} FROM ${t.schedules} WHERE due_at <= ? ORDER BY due_at, key LIMIT ?`,
    /** The first entry of the (due_at, key) index. */
    nextDueAt: `SELECT due_at FROM ${t.schedules} ORDER BY due_at, key LIMIT 1`,
    bumpVersion: `UPDATE ${t.meta} SET value = value + 1 WHERE name = 'schedule_version' RETURNING value`,
    readVersion: `SELECT value FROM ${t.meta} WHERE name = 'schedule_version'`,
    putSchedule: `INSERT INTO ${t.schedules} (key, at, due_at, version, attempts, message, last_error, recurrence)
      VALUES (@key, @at, @at, @version, 0, @message, NULL, @recurrence)
      ON CONFLICT (key) DO UPDATE SET at = excluded.at, due_at = excluded.due_at, version = excluded.version,
        attempts = 0, message = excluded.message, last_error = NULL, recurrence = excluded.recurrence`,
    /** A recurrence's next occurrence: never replaces a schedule written since the claim. */
    rearmSchedule: `INSERT INTO ${t.schedules} (key, at, due_at, version, attempts, message, last_error, recurrence)
      VALUES (@key, @at, @at, @version, 0, @message, NULL, @recurrence) ON CONFLICT (key) DO NOTHING`,
    deleteSchedule: `DELETE FROM ${t.schedules} WHERE key = ?`,
    deleteRange: `DELETE FROM ${t.schedules} WHERE key >= @lo AND key < @hi`,
    deleteFrom: `DELETE FROM ${t.schedules} WHERE key >= @lo AND substr(key, 1, length(@lo)) = @lo`,
    /** A delivery's claim: consumes the first `limit` due entries of the (due_at, key) index at once. */
    claimDue: `DELETE FROM ${t.schedules} WHERE key IN (
        SELECT key FROM ${t.schedules} WHERE due_at <= ? ORDER BY due_at, key LIMIT ?
      ) RETURNING ${columns}`,
    /** Puts a claimed schedule back at its version; a newer version written in the same batch wins. */
    restore: `INSERT INTO ${t.schedules} (key, at, due_at, version, attempts, message, last_error, recurrence)
      VALUES (@key, @at, @dueAt, @version, @attempts, @message, @error, @recurrence) ON CONFLICT (key) DO NOTHING`,
    loadDeadLetter: `SELECT ${deadColumns} FROM ${t.deadLetters} WHERE key = ?`,
    putDeadLetter: `INSERT OR REPLACE INTO ${t.deadLetters} (${deadColumns})
      VALUES (@key, @version, @at, @message, @attempts, @error, @deadAt)`,
    deleteDeadLetter: `DELETE FROM ${t.deadLetters} WHERE key = ?`,
    /** Cheap look on the read connection before a delivery takes the write lock. */
    anyDue: `SELECT 1 FROM ${t.schedules} WHERE due_at <= ? LIMIT 1`,
    loadEvents: `SELECT sequence, type, data, timestamp FROM ${t.events} WHERE aggregate_id = ? ORDER BY sequence`,
    lastSequence: `SELECT max(sequence) FROM ${t.events} WHERE aggregate_id = ?`,
    insertEvent: `INSERT INTO ${t.events} (aggregate_id, sequence, type, data, timestamp) VALUES (?, ?, ?, ?, ?)`,
  } as const;
}

export type StoreQuery = keyof ReturnType<typeof storeQueries>;

/** The shape of a `listSchedules` query; each shape is one cached statement. */
export interface ListShape {
  through: boolean;
  prefix: 'none' | 'range' | 'from';
  after: boolean;
}

/** `listSchedules`: ordered by the (at, key) index, with keyset paging by a row-value comparison. */
export function listQuery(t: Tables, shape: ListShape): string {
  const where: string[] = [];
  if (shape.through) where.push('at <= @through');
  if (shape.prefix === 'range') where.push('key >= @lo AND key < @hi');
  if (shape.prefix === 'from') where.push('key >= @lo AND substr(key, 1, length(@lo)) = @lo');
  if (shape.after) where.push('(at, key) > (@afterAt, @afterKey)');
  return `SELECT key, at, due_at, version, attempts, message, last_error, recurrence FROM ${t.schedules}${
    where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''
  } ORDER BY at, key LIMIT @limit`;
}

/** `listDeadLetters`: by key, with a literal prefix and keyset paging. */
export function deadLetterListQuery(
  t: Tables,
  shape: { prefix: 'none' | 'range' | 'from'; after: boolean },
): string {
  const where: string[] = [];
  if (shape.prefix === 'range') where.push('key >= @lo AND key < @hi');
  if (shape.prefix === 'from') where.push('key >= @lo AND substr(key, 1, length(@lo)) = @lo');
  if (shape.after) where.push('key > @after');
  return `SELECT key, version, at, message, attempts, error, dead_at FROM ${t.deadLetters}${
    where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''
  } ORDER BY key LIMIT @limit`;
}
