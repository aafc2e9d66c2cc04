import type { Tables } from './tables.js';

/** Every statement of the store, by name. Table names come from a validated prefix; values are bound. */
export function storeQueries(t: Tables) {
  const columns = 'key, at, due_at, version, attempts, message';
  return {
    loadSchedule: `SELECT ${columns} FROM ${t.schedules} WHERE key = ?`,
    /** Uses the (due_at, key) index: a range scan of the first `limit` entries. */
    dueSchedules: `SELECT ${columns} FROM ${t.schedules} WHERE due_at <= ? ORDER BY due_at, key LIMIT ?`,
    /** The first entry of the (due_at, key) index. */
    nextDueAt: `SELECT due_at FROM ${t.schedules} ORDER BY due_at, key LIMIT 1`,
    bumpVersion: `UPDATE ${t.meta} SET value = value + 1 WHERE name = 'schedule_version' RETURNING value`,
    readVersion: `SELECT value FROM ${t.meta} WHERE name = 'schedule_version'`,
    putSchedule: `INSERT INTO ${t.schedules} (key, at, due_at, version, attempts, message, last_error)
      VALUES (@key, @at, @at, @version, 0, @message, NULL)
      ON CONFLICT (key) DO UPDATE SET at = excluded.at, due_at = excluded.due_at, version = excluded.version,
        attempts = 0, message = excluded.message, last_error = NULL`,
    deleteSchedule: `DELETE FROM ${t.schedules} WHERE key = ?`,
    deleteRange: `DELETE FROM ${t.schedules} WHERE key >= @lo AND key < @hi`,
    deleteFrom: `DELETE FROM ${t.schedules} WHERE key >= @lo AND substr(key, 1, length(@lo)) = @lo`,
    consume: `DELETE FROM ${t.schedules} WHERE key = ? AND version = ?`,
    recordFailure: `UPDATE ${t.schedules} SET attempts = @attempts, due_at = @dueAt, last_error = @error
      WHERE key = @key AND version = @version`,
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
  return `SELECT key, at, due_at, version, attempts, message FROM ${t.schedules}${
    where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''
  } ORDER BY at, key LIMIT @limit`;
}
