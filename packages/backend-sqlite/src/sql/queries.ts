import type { Tables } from './tables.js';

const COLUMNS = 'key, at, due_at, version, attempts, message, last_error, recurrence';
const HEADS = 'key, at, due_at, version, attempts';
const DEAD_COLUMNS = 'key, version, at, message, attempts, error, dead_at';
/**
 * A page for display (`@preview` characters of data): the message without its data, and the data's JSON
 * text cut by SQLite (`substr` counts characters) with whether it was cut; the JSON text of a larger data
 * value never reaches the application. A message SQLite's JSON functions cannot take apart (nested deeper
 * than their limit of 1,000, which duetime does not refuse) comes whole, and core cuts it.
 */
const PLAIN = 'json_valid(message)';
const PREVIEW = `CASE WHEN ${PLAIN} THEN json_remove(message, '$.data') ELSE message END AS message,
  CASE WHEN ${PLAIN} THEN substr(message -> '$.data', 1, @preview) END AS data_text,
  CASE WHEN ${PLAIN} THEN length(message -> '$.data') > @preview END AS data_cut`;
const PREVIEW_COLUMNS = `key, at, due_at, version, attempts, ${PREVIEW}, last_error, recurrence`;
const DEAD_PREVIEW_COLUMNS = `key, version, at, ${PREVIEW}, attempts, error, dead_at`;

/** Every fixed statement of the store, by name. Table names come from a validated prefix; values are bound. */
export function storeQueries(t: Tables) {
  return {
    loadSchedule: `SELECT ${COLUMNS} FROM ${t.schedules} WHERE key = ?`,
    bumpVersion: `UPDATE ${t.meta} SET value = value + 1 WHERE name = 'schedule_version' RETURNING value`,
    readVersion: `SELECT value FROM ${t.meta} WHERE name = 'schedule_version'`,
    currentVersion: `SELECT version FROM ${t.schedules} WHERE key = ?`,
    putSchedule: `INSERT INTO ${t.schedules} (key, at, due_at, version, attempts, message, last_error, recurrence, recurring)
      VALUES (@key, @at, @dueAt, @version, 0, @message, NULL, @recurrence, @recurring)
      ON CONFLICT (key) DO UPDATE SET at = excluded.at, due_at = excluded.due_at, version = excluded.version,
        attempts = 0, message = excluded.message, last_error = NULL, recurrence = excluded.recurrence,
        recurring = excluded.recurring`,
    /** What comes next after a consumed version: never replaces a schedule written since the claim. */
    armNext: `INSERT INTO ${t.schedules} (key, at, due_at, version, attempts, message, last_error, recurrence, recurring)
      VALUES (@key, @at, @dueAt, @version, 0, @message, NULL, @recurrence, @recurring) ON CONFLICT (key) DO NOTHING`,
    deleteSchedule: `DELETE FROM ${t.schedules} WHERE key = ?`,
    deleteRange: `DELETE FROM ${t.schedules} WHERE key >= @lo AND key < @hi`,
    deleteFrom: `DELETE FROM ${t.schedules} WHERE key >= @lo AND substr(key, 1, length(@lo)) = @lo`,
    /** A settled version: deleted only while the key is still at it. */
    consume: `DELETE FROM ${t.schedules} WHERE key = ? AND version = ?`,
    retry: `UPDATE ${t.schedules} SET attempts = @attempts, last_error = @error, due_at = @dueAt, at = coalesce(@at, at)
      WHERE key = @key AND version = @version`,
    /**
     * A delivery's claim, in the (due_at, key) index order: due versions that no live claim holds. A claim
     * of the same version that lapsed was never settled: its process died (`interrupted`).
     */
    claimDue: `SELECT ${COLUMNS.split(', ')
      .map((c) => `s.${c}`)
      .join(', ')}, (c.version = s.version) AS interrupted
      FROM ${t.schedules} s LEFT JOIN ${t.claims} c ON c.key = s.key
      WHERE s.due_at <= @now AND (c.key IS NULL OR c.version <> s.version OR c.claimed_until <= @wall)
      ORDER BY s.due_at, s.key LIMIT @limit`,
    putClaim: `INSERT OR REPLACE INTO ${t.claims} (key, version, owner, claimed_until) VALUES (?, ?, ?, ?)`,
    holdsClaim: `SELECT 1 FROM ${t.claims} WHERE key = ? AND owner = ? AND version = ?`,
    dropClaim: `DELETE FROM ${t.claims} WHERE key = ? AND owner = ?`,
    putDeadLetter: `INSERT OR REPLACE INTO ${t.deadLetters} (${DEAD_COLUMNS})
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

/** How a literal key prefix is searched: an index range, from the prefix with a check, or not at all. */
export type PrefixShape = 'none' | 'range' | 'from';

/** The shape of a `listSchedules` query; each shape is one cached statement. */
export interface ListShape {
  order: 'at' | 'due' | 'key';
  through: boolean;
  prefix: PrefixShape;
  after: boolean;
  /** Filter on the recurring flag (`@recurring`). */
  recurring: boolean;
  /**
   * What is read: whole schedules, heads (no payload), schedules with their data cut at `@preview`, or
   * nothing but the count of the matching rows (up to `@limit`, on the order's index).
   */
  select: 'all' | 'heads' | 'preview' | 'count';
}

/** `listSchedules`: in the order's index, with keyset paging by a row-value comparison. */
export function listQuery(t: Tables, shape: ListShape): string {
  const instant = shape.order === 'due' ? 'due_at' : 'at';
  const where: string[] = [];
  if (shape.through) where.push(`${instant} <= @through`);
  where.push(...prefixWhere(shape.prefix));
  if (shape.recurring) where.push('recurring = @recurring');
  if (shape.after)
    where.push(shape.order === 'key' ? 'key > @afterKey' : `(${instant}, key) > (@afterAt, @afterKey)`);
  const order = shape.order === 'key' ? 'key' : `${instant}, key`;
  const columns = { all: COLUMNS, heads: HEADS, preview: PREVIEW_COLUMNS, count: '1' }[shape.select];
  const text = `SELECT ${columns} FROM ${t.schedules}${
    where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''
  } ORDER BY ${order} LIMIT @limit`;
  return shape.select === 'count' ? `SELECT count(*) AS n FROM (${text})` : text;
}

/** The shape of a `listDeadLetters` query (or of a count, up to `@limit`, on the key's index). */
export interface DeadLetterShape {
  prefix: PrefixShape;
  after: boolean;
  select: 'all' | 'preview' | 'count';
}

/** `listDeadLetters`: by key, with a literal prefix and keyset paging. */
export function deadLetterListQuery(t: Tables, shape: DeadLetterShape): string {
  const where = prefixWhere(shape.prefix);
  if (shape.after) where.push('key > @after');
  const columns = { all: DEAD_COLUMNS, preview: DEAD_PREVIEW_COLUMNS, count: '1' }[shape.select];
  const text = `SELECT ${columns} FROM ${t.deadLetters}${
    where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''
  } ORDER BY key LIMIT @limit`;
  return shape.select === 'count' ? `SELECT count(*) AS n FROM (${text})` : text;
}

function prefixWhere(prefix: PrefixShape): string[] {
  if (prefix === 'range') return ['key >= @lo AND key < @hi'];
  if (prefix === 'from') return ['key >= @lo AND substr(key, 1, length(@lo)) = @lo'];
  return [];
}
