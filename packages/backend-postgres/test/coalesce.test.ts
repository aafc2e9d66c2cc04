import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { coalesceWrites } from '../src/coalesce.js';
import { PG_URL, urlWithUser } from './adapter.js';

const clients: pg.Client[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.end()));
});

/** A connected client, and a count of the writes its socket hands the operating system. */
async function counted(config: { pipeline: boolean }) {
  const client = new pg.Client({ connectionString: urlWithUser(PG_URL), ...config } as pg.ClientConfig);
  clients.push(client);
  await client.connect();
  const socket = (client as unknown as { connection: { stream: Record<string, unknown> } }).connection.stream;
  const writes = { count: 0 };
  for (const method of ['_write', '_writev'] as const) {
    const original = socket[method] as (...args: unknown[]) => unknown;
    socket[method] = function (this: unknown, ...args: unknown[]) {
      writes.count++;
      return original.apply(this, args);
    };
  }
  return { client, writes };
}

const TEN = Array.from({ length: 10 }, (_, i) => i);

describe('coalesceWrites', () => {
  it('sends the statements of one turn on a pipelined client in one write, answered in order', async () => {
    const { client, writes } = await counted({ pipeline: true });
    coalesceWrites(client);
    coalesceWrites(client); // a pooled client is checked out again: nothing doubles
    const answers = await Promise.all(
      TEN.map((i) => client.query<{ n: number }>('SELECT $1::int AS n', [i])),
    );
    expect(writes.count).toBe(1);
    expect(answers.map((a) => a.rows[0]!.n)).toEqual(TEN);
    // The next turn's statements go out in a write of their own, and a failed one fails alone.
    const next = await Promise.allSettled([
      client.query('SELECT 1/0'),
      client.query<{ n: number }>('SELECT 2 AS n'),
    ]);
    expect(writes.count).toBe(2);
    expect(next[0]!.status).toBe('rejected');
    expect(next[1]!.status === 'fulfilled' && next[1]!.value.rows[0]!.n).toBe(2);
  });

  it('writes a long turn every 32 statements, so the server starts on the first while the rest are built', async () => {
    const { client, writes } = await counted({ pipeline: true });
    coalesceWrites(client);
    const hundred = Array.from({ length: 100 }, (_, i) => i);
    const answers = await Promise.all(
      hundred.map((i) => client.query<{ n: number }>('SELECT $1::int AS n', [i])),
    );
    // 32, 64, 96 as they accumulate (the stream may join a write still pending), the last 4 at the turn's end.
    expect(writes.count).toBeGreaterThanOrEqual(2);
    expect(writes.count).toBeLessThanOrEqual(4);
    expect(answers.map((a) => a.rows[0]!.n)).toEqual(hundred);
  });

  it('a pipelined client left as it is writes each statement on its own (what the coalescing saves)', async () => {
    const { client, writes } = await counted({ pipeline: true });
    await Promise.all(TEN.map((i) => client.query('SELECT $1::int AS n', [i])));
    // One each, unless the socket was still busy with an earlier one (the stream then writes the rest together).
    expect(writes.count).toBeGreaterThan(1);
  });

  it('leaves a client that does not pipeline as it is', async () => {
    const { client, writes } = await counted({ pipeline: false });
    const query = client.query;
    coalesceWrites(client);
    expect(client.query).toBe(query);
    for (const i of TEN) await client.query('SELECT $1::int AS n', [i]);
    expect(writes.count).toBe(10);
  });
});
