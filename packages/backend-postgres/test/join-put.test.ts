import { freshNamespace } from '@duetime/conformance';
import { interval, type Message, recurring } from '@duetime/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../src/index.js';
import { dropSchemas, PG_URL, schemaFor, urlWithUser } from './adapter.js';

const HOUR = 3_600_000;
const msg = (id: string): Message => ({ type: 'order.expire', aggregateId: id });

afterAll(async () => {
  await dropSchemas();
});

/**
 * The put of a joined transaction: one key goes by `put_schedule` (migration 7, scalar arguments),
 * several by `put_schedules` (migration 6); both are the store's put, with the same effects.
 */
describe('store.join: the put of one key and of several', () => {
  it('calls put_schedule for one key and put_schedules for several, each a new version that resets the row', async () => {
    const schema = schemaFor(freshNamespace());
    const pool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 2 });
    const backend = await createPostgresBackend({ pool }, { schema });
    const client = await pool.connect();
    const sent: string[] = [];
    const executor = {
      async query(text: string, params: readonly unknown[]) {
        sent.push(text);
        const result = await client.query(text, [...params]);
        return { rows: result.rows, rowCount: result.rowCount ?? 0 };
      },
      inTransaction: () => client.getTransactionStatus() === 'T',
    };
    const row = async (key: string) =>
      (
        await pool.query(
          `SELECT version::int8::text AS version, attempts, last_error, claimed_until, claim_owner, recurring,
             recurrence IS NOT NULL AS stored, message::text AS message
           FROM "${schema}".schedules WHERE key = $1`,
          [key],
        )
      ).rows[0];
    try {
      const at = new Date(Date.now() + HOUR);
      await client.query('BEGIN');
      await backend.store.join(executor, (tx) => tx.schedule('one/a', at, msg('a')));
      await backend.store.join(executor, async (tx) => {
        await tx.schedule('many/b', at, msg('b'));
        await tx.schedule('many/c', recurring(interval(HOUR)), msg('c'));
      });
      await client.query('COMMIT');
      expect(sent.filter((t) => t.includes('.put_schedule(')).length).toBe(1);
      expect(sent.filter((t) => t.includes('.put_schedules(')).length).toBe(1);
      const first = await row('one/a');
      expect(first).toMatchObject({ attempts: 0, recurring: false, stored: false });
      expect(JSON.parse(first.message)).toEqual(msg('a'));
      expect(await row('many/c')).toMatchObject({ recurring: true, stored: true });

      // A replacement through the scalar function: a newer version, attempts, error and claim reset.
      await pool.query(
        `UPDATE "${schema}".schedules SET attempts = 3, last_error = 'boom',
           claimed_until = now() + interval '1 hour', claim_owner = 'someone' WHERE key = 'one/a'`,
      );
      const later = new Date(at.getTime() + HOUR);
      await client.query('BEGIN');
      await backend.store.join(executor, (tx) => tx.schedule('one/a', later, msg('a2')));
      await backend.store.join(executor, (tx) => tx.schedule('one/d', recurring(interval(HOUR)), msg('d')));
      await client.query('COMMIT');
      const replaced = await row('one/a');
      expect(BigInt(replaced.version)).toBeGreaterThan(BigInt(first.version));
      expect(replaced).toMatchObject({
        attempts: 0,
        last_error: null,
        claimed_until: null,
        claim_owner: null,
      });
      expect(JSON.parse(replaced.message)).toEqual(msg('a2'));
      expect((await backend.store.loadSchedule('one/a'))?.at).toEqual(later);
      expect(await row('one/d')).toMatchObject({ recurring: true, stored: true });
      expect(sent.filter((t) => t.includes('.put_schedule(')).length).toBe(3);

      // Versions of both functions come from the one store-wide sequence: all distinct.
      const versions = (await pool.query(`SELECT version FROM "${schema}".schedules`)).rows.map(
        (r) => r.version,
      );
      expect(new Set(versions).size).toBe(4);
    } finally {
      client.release();
      await backend.close();
      await pool.end();
    }
  });
});
