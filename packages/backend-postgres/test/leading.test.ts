import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Lead, queryWithLead } from '../src/leading.js';
import { PG_URL, urlWithUser } from './adapter.js';

// Transaction control riding with the next statement (src/leading.ts), on a real server and client.

let client: pg.Client;
let failures: unknown[];
/** Round trips: the client's ready messages (one per answered Sync or simple query). */
let readies: number;

function lead(...statements: string[]): Lead {
  return { statements, failed: (error) => failures.push(error) };
}

function send(args: unknown[], l: Lead): Promise<pg.QueryResult> {
  const sent = queryWithLead(client, args, l);
  expect(sent.sent).toBe(true);
  return sent.result as Promise<pg.QueryResult>;
}

beforeEach(async () => {
  client = new pg.Client({ connectionString: urlWithUser(PG_URL) });
  await client.connect();
  await client.query('CREATE TEMP TABLE t (id int PRIMARY KEY, v text)');
  failures = [];
  readies = 0;
  (client as unknown as { connection: pg.Connection }).connection.on('readyForQuery', () => readies++);
});

afterEach(async () => {
  await client.end();
});

describe('control statements ahead of a statement, in its round trip', () => {
  it('runs BEGIN and a savepoint ahead of a statement in one round trip, returning only its result', async () => {
    const result = await send(
      ['INSERT INTO t VALUES ($1, $2) RETURNING v', [1, 'a']],
      lead('BEGIN', 'SAVEPOINT p'),
    );
    expect(readies).toBe(1);
    expect(result.command).toBe('INSERT');
    expect(result.rows).toEqual([{ v: 'a' }]);
    expect(client.getTransactionStatus()).toBe('T');
    // The savepoint exists: rolling back to it undoes the insert.
    await client.query('ROLLBACK TO SAVEPOINT p');
    expect((await client.query('SELECT count(*)::int AS n FROM t')).rows[0].n).toBe(0);
    await client.query('ROLLBACK');
    expect(failures).toEqual([]);
  });

  it('keeps the statement’s own options (row mode) and callback form', async () => {
    await client.query('INSERT INTO t VALUES (1, $1)', ['a']);
    const rows = await send(
      [{ text: 'SELECT id, v FROM t WHERE id = $1', values: [1], rowMode: 'array' }],
      lead('BEGIN'),
    );
    expect(rows.rows).toEqual([[1, 'a']]);
    const viaCallback = await new Promise<pg.QueryResult>((resolve, reject) => {
      const sent = queryWithLead(
        client,
        [
          'SELECT $1::int AS n',
          [5],
          (error: Error | null, r: pg.QueryResult) => (error ? reject(error) : resolve(r)),
        ],
        lead('SAVEPOINT p'),
      );
      expect(sent).toEqual({ sent: true, result: undefined });
    });
    expect(viaCallback.rows).toEqual([{ n: 5 }]);
    await client.query('ROLLBACK');
  });

  it('reports the statement’s own failure as its error, with the lead through', async () => {
    await client.query('BEGIN');
    await client.query('INSERT INTO t VALUES (1, $1)', ['a']);
    await expect(
      send(['INSERT INTO t VALUES ($1, $2)', [1, 'b']], lead('SAVEPOINT p')),
    ).rejects.toMatchObject({
      code: '23505',
    });
    expect(failures).toEqual([]);
    // The lead went through: the savepoint is there to roll back to, and the transaction goes on.
    await client.query('ROLLBACK TO SAVEPOINT p');
    expect((await client.query('SELECT v FROM t')).rows).toEqual([{ v: 'a' }]);
    await client.query('ROLLBACK');
  });

  it('skips the statement when a lead statement fails, and tells the lead', async () => {
    await client.query('BEGIN');
    await client.query('SELECT 1/0').catch(() => {});
    await expect(
      send(['INSERT INTO t VALUES ($1, $2)', [2, 'b']], lead('SAVEPOINT p')),
    ).rejects.toMatchObject({
      code: '25P02',
    });
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ code: '25P02' });
    await client.query('ROLLBACK');
    expect((await client.query('SELECT count(*)::int AS n FROM t')).rows[0].n).toBe(0);
  });

  it('declines what it cannot fuse, sending nothing: simple-protocol text, named and paged statements, a pipelined client', () => {
    for (const args of [
      ['SELECT 1'],
      ['SELECT 1; SELECT 2'],
      [{ text: 'SELECT $1::int', values: [1], name: 'named' }],
      [{ text: 'SELECT $1::int', values: [1], rows: 10 }],
    ])
      expect(queryWithLead(client, args, lead('BEGIN'))).toEqual({ sent: false });
    const pipelined = new pg.Client({
      connectionString: urlWithUser(PG_URL),
      pipeline: true,
    } as pg.ClientConfig);
    expect(queryWithLead(pipelined, ['SELECT $1::int', [1]], lead('BEGIN'))).toEqual({ sent: false });
    expect(readies).toBe(0);
  });
});
