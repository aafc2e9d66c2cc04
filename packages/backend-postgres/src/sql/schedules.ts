import type { ListQuery, ScheduleFields } from '@duetime/core';
import { epochMs, PG_MIN_TIME, pgTimestamp } from './time.js';

/** Columns every schedule read returns, in the shape {@link ScheduleRow} describes. */
const COLUMNS = `key, ${epochMs('at')} AS at, ${epochMs('due_at')} AS "dueAt", version, attempts, message,
  last_error AS "lastError", recurrence`;
/** The columns of a read that needs no payload (`select: 'heads'`). */
const HEADS = `key, ${epochMs('at')} AS at, ${epochMs('due_at')} AS "dueAt", version, attempts`;

/**
 * A page for display takes each message apart once: one pass of `json_each` over its top-level fields
 * gives the message without its data (`preview.rest`) and the data's JSON text as written
 * (`preview.data`, `JSON.stringify`'s text: the column is `json`, kept as given). PostgreSQL's JSON
 * functions de-escape strings and refuse a `\u0000` in them (SQLSTATE 22P05), so a message holding one
 * (or anything that looks like one) is not taken apart: it comes whole, and core cuts it.
 */
export const PREVIEW_JOIN = `LEFT JOIN LATERAL (
    SELECT json_object_agg(k, v) FILTER (WHERE k <> 'data') AS rest, min(v::text) FILTER (WHERE k = 'data') AS data
    FROM json_each(CASE WHEN strpos(message::text, '\\u0000') = 0 THEN message END) AS field(k, v)
  ) AS preview ON true`;

/**
 * The columns of a page for display, with {@link PREVIEW_JOIN} (`n`, a parameter placeholder): the message
 * without its data, and the data's JSON text cut by the server (`left` counts characters) with whether it
 * was cut.
 */
export const previewColumns = (n: string) => `coalesce(preview.rest, message) AS message,
  left(preview.data, ${n}) AS "dataText", length(preview.data) > ${n} AS "dataCut"`;

const PREVIEW = (
  n: string,
) => `key, ${epochMs('at')} AS at, ${epochMs('due_at')} AS "dueAt", version, attempts,
  ${previewColumns(n)}, last_error AS "lastError", recurrence`;

/** A schedule as read: core's `ScheduleFields` (instants as epoch ms, JSON as text). */
export type ScheduleRow = ScheduleFields & {
  at: number;
  dueAt: number;
  version: number;
  attempts: number;
  interrupted?: boolean;
  /** `preview` reads: the data's JSON text, cut, and whether it was. */
  dataText?: string | null;
  dataCut?: boolean | null;
};

/** What a put sets besides its key, its instants and its payload: a fresh, unclaimed version. */
const FRESH = (s: string, t: string) => `at = EXCLUDED.at,
        due_at = EXCLUDED.due_at,
        version = CASE WHEN EXCLUDED.version > ${t}.version THEN EXCLUDED.version
                       ELSE nextval('${s}.schedule_versions') END,
        attempts = 0,
        message = EXCLUDED.message,
        last_error = NULL,
        recurrence = EXCLUDED.recurrence,
        recurring = EXCLUDED.recurring,
        claimed_until = NULL,
        claim_owner = NULL`;

const MS = (param: string) => `clock_timestamp() + ${param}::float8 * interval '1 millisecond'`;

/**
 * The statements on `<schema>.schedules`, with `$n` parameters. `s` is the quoted schema name. Instants
 * go in as timestamptz text (see `pgTimestamp`) and come back as epoch milliseconds; JSON goes in as text
 * (`text[]` arrays cast in SQL), so every driver and library sends the same parameters.
 */
export function scheduleSql(s: string) {
  return {
    /** $1 key */
    load: `SELECT ${COLUMNS} FROM ${s}.schedules WHERE key = $1`,

    /**
     * Creates or replaces schedules with distinct keys in one statement: $1 keys, $2 at, $3 due_at, $4
     * messages, $5 stored states (JSON or NULL), $6 recurring flags; arrays of one length. `attempts`
     * resets, the claim is cleared. Versions come from the store-wide sequence; when a concurrent
     * replacement committed a larger version while this one waited for the row lock, a fresh number is
     * drawn after the lock, so a key's versions grow in commit order.
     */
    put: `INSERT INTO ${s}.schedules AS t (key, at, due_at, version, attempts, message, recurrence, recurring)
      SELECT p.key, p.at, p.due_at, nextval('${s}.schedule_versions'), 0, p.message::json, p.recurrence::json,
        p.recurring
      FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[], $6::bool[])
        AS p(key, at, due_at, message, recurrence, recurring)
      ON CONFLICT (key) DO UPDATE SET ${FRESH(s, 't')}`,

    /** `put` through its function (migration 6), whose plan the session keeps: for joined transactions. */
    putCall: `SELECT ${s}.put_schedules($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[], $6::bool[]) AS n`,

    /**
     * `put` of one schedule through its function (migration 7), with scalar parameters: $1 key, $2 at, $3
     * due_at, $4 message, $5 stored state (JSON text or NULL), $6 recurring. For joined transactions that
     * put one key, where the server spends less on it than on `putCall` with arrays of one. The JSON is cast
     * here, not inside the function (see migration 7).
     */
    putOneCall: `SELECT ${s}.put_schedule($1::text, $2::timestamptz, $3::timestamptz, $4::text::json, $5::text::json, $6::bool) AS n`,

    /** A put with `ifVersion`: $1 key, $2 at, $3 due_at, $4 message, $5 state, $6 recurring, $7 version. */
    putIfVersion: `UPDATE ${s}.schedules SET at = $2::timestamptz, due_at = $3::timestamptz,
        version = nextval('${s}.schedule_versions'), attempts = 0, message = $4::text::json, last_error = NULL,
        recurrence = $5::text::json, recurring = $6::bool, claimed_until = NULL, claim_owner = NULL
      WHERE key = $1 AND version = $7::int8`,

    /** $1 key */
    delete: `DELETE FROM ${s}.schedules WHERE key = $1`,

    /** $1 prefix: literal (`starts_with`: no pattern characters); an index range on the "C"-collated key. */
    deletePrefix: `DELETE FROM ${s}.schedules WHERE starts_with(key, $1)`,

    /**
     * A delivery's claim, one short statement committed on its own: walks schedules_due_idx (due_at, key)
     * from its start, locks the first $2 due rows ($1 now) that nobody holds a live claim on (SKIP LOCKED:
     * concurrent claims never wait for each other), and marks them claimed by $4 for $3 ms of the
     * server's clock. A row whose earlier claim lapsed unsettled comes back `interrupted` (a put clears the
     * claim, so a lapsed claim is always on the current version). The picked keys, also given as an array,
     * make the update find its rows through the primary key: joined to the CTE alone, a table of a few
     * ten thousand rows was read whole into a hash for every claim (about 9 ms at 20,000 rows).
     * The claim's commit waits for its WAL flush like any other: with PGlite the database lives in the
     * dispatcher's process, and a claim not yet flushed when that process dies would leave the crash
     * uncounted (test/pglite-crash.test.ts).
     */
    claim: `WITH picked AS (
        SELECT key, claimed_until FROM ${s}.schedules
        WHERE due_at <= $1::timestamptz AND (claimed_until IS NULL OR claimed_until < clock_timestamp())
        ORDER BY due_at, key LIMIT $2 FOR UPDATE SKIP LOCKED
      ), claimed AS (
        UPDATE ${s}.schedules t SET claimed_until = ${MS('$3')}, claim_owner = $4
        FROM picked WHERE t.key = ANY (ARRAY(SELECT key FROM picked)) AND t.key = picked.key
        RETURNING t.*, picked.claimed_until IS NOT NULL AS interrupted
      )
      SELECT ${COLUMNS}, interrupted FROM claimed ORDER BY claimed.due_at, claimed.key`,

    /**
     * Locks, in the delivery's transaction, the rows of keys $1 still claimed by $2: while it is open, a
     * replacement or a cancellation of them waits for its commit, and no other claim takes them even if
     * their claims lapse (a lapse then only matters once the connection is gone).
     */
    lock: `SELECT key FROM ${s}.schedules WHERE key = ANY ($1::text[]) AND claim_owner = $2 FOR UPDATE`,

    /** Extends the claims of $3 on keys $1 by $2 ms; rows the claiming unit is writing are skipped. */
    renew: `UPDATE ${s}.schedules SET claimed_until = ${MS('$2')}
      WHERE key IN (SELECT key FROM ${s}.schedules WHERE key = ANY ($1::text[]) AND claim_owner = $3
        FOR UPDATE SKIP LOCKED)`,

    /** Ends the claims of $2 on keys $1, leaving the schedules as they are. */
    release: `UPDATE ${s}.schedules SET claimed_until = NULL, claim_owner = NULL
      WHERE key = ANY ($1::text[]) AND claim_owner = $2`,

    /** Consumes claimed versions: $1 keys, $2 versions, $3 claim owner. */
    consume: `DELETE FROM ${s}.schedules t USING unnest($1::text[], $2::int8[]) AS c(key, version)
      WHERE t.key = c.key AND t.version = c.version AND t.claim_owner = $3`,

    /**
     * Records failed attempts of claimed versions and ends their claims: $1 keys, $2 versions, $3
     * attempts, $4 errors, $5 due_at, $6 at (NULL: unchanged), $7 claim owner.
     */
    retry: `UPDATE ${s}.schedules t SET attempts = c.attempts, last_error = c.error, due_at = c.due_at,
        at = coalesce(c.at, t.at), claimed_until = NULL, claim_owner = NULL
      FROM unnest($1::text[], $2::int8[], $3::int4[], $4::text[], $5::timestamptz[], $6::timestamptz[])
        AS c(key, version, attempts, error, due_at, at)
      WHERE t.key = c.key AND t.version = c.version AND t.claim_owner = $7`,

    /**
     * Arms what comes next of consumed schedules, each a new version, only where the key has no active
     * schedule (one written since the claim wins): arrays as in {@link put}.
     */
    next: `INSERT INTO ${s}.schedules (key, at, due_at, version, attempts, message, recurrence, recurring)
      SELECT p.key, p.at, p.due_at, nextval('${s}.schedule_versions'), 0, p.message::json, p.recurrence::json,
        p.recurring
      FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[], $6::bool[])
        AS p(key, at, due_at, message, recurrence, recurring)
      ON CONFLICT (key) DO NOTHING`,

    /** The listing query for `q`, with its parameters. */
    list(q: ListQuery): { text: string; params: unknown[] } {
      if (q.select !== 'heads' && q.preview !== undefined) {
        const n = q.preview;
        return listing(q, ($) => PREVIEW($(n, '::int')), PREVIEW_JOIN);
      }
      return listing(q, () => (q.select === 'heads' ? HEADS : COLUMNS));
    },

    /** How many schedules `q` matches, up to its limit: the same walk of the same index, reading no row. */
    count(q: Omit<ListQuery, 'after' | 'select' | 'preview'>): { text: string; params: unknown[] } {
      const { text, params } = listing(q, () => '1');
      return { text: `SELECT count(*)::int AS n FROM (${text}) AS matching`, params };
    },
  };

  function listing(
    q: Omit<ListQuery, 'select' | 'preview'>,
    columns: ($: (value: unknown, cast?: string) => string) => string,
    join = '',
  ): { text: string; params: unknown[] } {
    const instant = q.order === 'due' ? 'due_at' : 'at';
    const params: unknown[] = [];
    const $ = (value: unknown, cast = '') => `$${params.push(value)}${cast}`;
    const selected = columns($);
    const time = (ms: number) => $(pgTimestamp(new Date(Math.max(ms, PG_MIN_TIME))), '::timestamptz');
    const where: string[] = [];
    if (q.through && q.order !== 'key') where.push(`${instant} <= ${time(q.through.getTime())}`);
    if (q.prefix !== undefined) where.push(`starts_with(key, ${$(q.prefix)})`);
    if (q.recurring !== undefined) where.push(`recurring = ${$(q.recurring, '::bool')}`);
    if (q.after)
      where.push(
        q.order === 'key'
          ? `key > ${$(q.after.key)}`
          : `(${instant}, key) > (${time(q.after.at)}, ${$(q.after.key)})`,
      );
    const filter = where.length > 0 ? `WHERE ${where.join(' AND ')}` : '';
    // Qualified: a bare `at` in ORDER BY would name the output column (epoch ms), not the indexed one, and
    // the listing would sort every row (computing each one's columns) instead of walking schedules_at_idx.
    const order = q.order === 'key' ? 'schedules.key' : `schedules.${instant}, schedules.key`;
    return {
      text: `SELECT ${selected} FROM ${s}.schedules ${join} ${filter} ORDER BY ${order} LIMIT ${$(q.limit)}`,
      params,
    };
  }
}
