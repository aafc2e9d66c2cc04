import { randomBytes } from 'node:crypto';
import { effects, freshNamespace, waitFor } from '@duetime/conformance';
import { BackendError, ClosedError, InvalidArgumentError, type Message } from '@duetime/core';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../src/index.js';
import { adminClient, dropSchemas, open, PG_URL, schemaFor, urlWithUser } from './adapter.js';

const HOUR = 3_600_000;
const msg = (id: string, data?: unknown): Message => ({
  type: 'order.expire',
  aggregateId: id,
  ...(data === undefined ? {} : { data }),
});
let admin: pg.Client;

beforeAll(async () => {
  admin = await adminClient();
});
afterAll(async () => {
  await admin.end();
  await dropSchemas();
});

/** A backend on the application's own pool, with an application table next to duetime's. */
async function withAppTable() {
  const schema = schemaFor(freshNamespace());
  const pool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 4 });
  const backend = await createPostgresBackend({ pool }, { schema });
  await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY, status text NOT NULL)`);
  const orders = async () => (await pool.query(`SELECT id, status FROM "${schema}".orders ORDER BY id`)).rows;
  return { schema, pool, backend, orders };
}

describe('tx.sql: the application’s SQL in the same transaction', () => {
  it('commits the application’s row and the schedule together, on the application’s pool', async () => {
    const { schema, pool, backend, orders } = await withAppTable();
    try {
      const at = new Date(Date.now() + HOUR);
      await backend.store.transact(async (tx) => {
        await tx.sql.query(`INSERT INTO "${schema}".orders VALUES ($1, 'placed')`, ['ORD-1']);
        await tx.schedule('order/ORD-1/expire', at, msg('ORD-1'));
        // Inside the transaction both are visible on the same client.
        const seen = await tx.sql.query(`SELECT status FROM "${schema}".orders WHERE id = 'ORD-1'`);
        expect(seen.rows[0]?.status).toBe('placed');
        expect((await tx.loadSchedule('order/ORD-1/expire'))?.version).toBeGreaterThan(0);
      });
      expect(await orders()).toEqual([{ id: 'ORD-1', status: 'placed' }]);
      expect((await backend.store.loadSchedule('order/ORD-1/expire'))?.at.getTime()).toBe(at.getTime());
    } finally {
      await backend.close();
      // close() never ends a pool the application passed in.
      expect(pool.ended).toBe(false);
      expect((await pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
      await pool.end();
    }
  });

  it('rolls both back when the function throws after writing both', async () => {
    const { schema, pool, backend, orders } = await withAppTable();
    try {
      const boom = new Error('payment declined');
      await expect(
        backend.store.transact(async (tx) => {
          await tx.schedule('order/ORD-2/expire', new Date(Date.now() + HOUR), msg('ORD-2'));
          await tx.sql.query(`INSERT INTO "${schema}".orders VALUES ('ORD-2', 'placed')`);
          await tx.cancelSchedulePrefix('order/');
          throw boom;
        }),
      ).rejects.toBe(boom);
      expect(await orders()).toEqual([]);
      expect(await backend.store.listSchedules()).toEqual([]);
    } finally {
      await backend.close();
      await pool.end();
    }
  });

  it('refuses to report success when an error inside the transaction was caught and swallowed', async () => {
    const { schema, pool, backend, orders } = await withAppTable();
    try {
      const error = await backend.store
        .transact(async (tx) => {
          await tx.sql.query(`INSERT INTO "${schema}".orders VALUES ('ORD-3', 'placed')`);
          await tx.sql.query('SELECT * FROM no_such_table').catch(() => {});
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(BackendError);
      expect((error as Error).message).toMatch(/rolled back/);
      expect(await orders()).toEqual([]);
    } finally {
      await backend.close();
      await pool.end();
    }
  });

  it('turns a deadlock between two transactions into a conflict and re-runs the loser', async () => {
    const backend = await open(freshNamespace());
    try {
      const at = new Date(Date.now() + HOUR);
      await backend.store.transact(async (tx) => {
        await tx.schedule('dl/a', at, msg('a'));
        await tx.schedule('dl/b', at, msg('b'));
      });
      let arrived = 0;
      let release!: () => void;
      const bothHoldOne = new Promise<void>((resolve) => {
        release = resolve;
      });
      const runs = { first: 0, second: 0 };
      const cross = (name: 'first' | 'second', mine: string, theirs: string) =>
        backend.store.transact(async (tx) => {
          runs[name]++;
          await tx.sql.query(`SELECT 1`); // make sure the transaction has begun
          await tx.schedule(mine, at, msg(name));
          await tx.loadSchedule(mine); // sends the upsert: this transaction now holds `mine`
          if (runs[name] === 1) {
            if (++arrived === 2) release();
            await bothHoldOne;
          }
          await tx.cancelSchedule(theirs);
        });
      await Promise.all([cross('first', 'dl/a', 'dl/b'), cross('second', 'dl/b', 'dl/a')]);
      expect(runs.first + runs.second).toBe(3); // exactly one of them was re-run
    } finally {
      await backend.close();
    }
  });

  it('maps a unique violation on the event stream to an aggregate conflict, not a backend error', async () => {
    const backend = await open(freshNamespace());
    try {
      let attempts = 0;
      let release!: () => void;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      const slow = backend.store.transact(async (tx) => {
        attempts++;
        await tx.exec(effects, 'agg', async (_s, ag) => {
          if (attempts === 1) await gate;
          ag.raise('effect.applied');
        });
      });
      await backend.store.transact((tx) => tx.exec(effects, 'agg', (_s, ag) => ag.raise('effect.applied')));
      release();
      await slow;
      expect(attempts).toBe(2);
      expect((await backend.store.loadEvents('agg')).map((e) => e.sequence)).toEqual([1, 2]);
    } finally {
      await backend.close();
    }
  });
});

describe('isolation', () => {
  it('runs at READ COMMITTED whatever the server default, and lets the application raise it first', async () => {
    const pool = new pg.Pool({
      connectionString: urlWithUser(PG_URL),
      max: 2,
      options: '-c default_transaction_isolation=serializable',
    });
    const backend = await createPostgresBackend({ pool }, { schema: schemaFor(freshNamespace()) });
    try {
      const level = (client: pg.PoolClient) =>
        client.query('SHOW transaction_isolation').then((r) => r.rows[0].transaction_isolation as string);
      expect(
        await pool.query('SHOW transaction_isolation').then((r) => r.rows[0].transaction_isolation),
      ).toBe('serializable');
      expect(await backend.store.transact((tx) => level(tx.sql))).toBe('read committed');
      const raised = await backend.store.transact(async (tx) => {
        await tx.sql.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE');
        await tx.schedule('iso/1', new Date(Date.now() + HOUR), msg('iso'));
        await tx.loadSchedule('iso/1');
        return level(tx.sql);
      });
      expect(raised).toBe('serializable');
      expect(await backend.store.loadSchedule('iso/1')).toBeDefined();
    } finally {
      await backend.close();
      await pool.end();
    }
  });
});

describe('sharing one application pool', () => {
  it('keeps two schemas apart on one pool, with and without prepared statements', async () => {
    const pool = new pg.Pool({ connectionString: urlWithUser(PG_URL), max: 2 });
    const [one, two] = [schemaFor(freshNamespace()), schemaFor(freshNamespace())];
    const a = await createPostgresBackend({ pool }, { schema: one });
    const b = await createPostgresBackend({ pool }, { schema: two, preparedStatements: false });
    try {
      const at = new Date(Date.now() - 1);
      for (let i = 0; i < 5; i++) {
        await a.store.transact((tx) => tx.schedule(`k/${i}`, at, msg('a')));
        await b.store.transact((tx) => tx.schedule(`k/${i}`, at, msg('b')));
        // The same statements, on the same two connections, against different schemas.
        expect((await a.store.loadSchedule(`k/${i}`))?.message.aggregateId).toBe('a');
        expect((await b.store.loadSchedule(`k/${i}`))?.message.aggregateId).toBe('b');
        expect((await a.store.listSchedules(new Date())).length).toBe(i + 1);
        expect((await b.store.listSchedules(new Date())).length).toBe(i + 1);
        expect((await a.leases.acquire(`l/${i}`, 'a', 10_000))?.token).toBe(1);
        expect((await b.leases.acquire(`l/${i}`, 'b', 10_000))?.token).toBe(1);
      }
    } finally {
      await a.close();
      await b.close();
      await pool.end();
    }
  });
});

describe('buffered puts inside a transaction', () => {
  it('sees its own puts, keeps the last put per key, and gives it a newer version', async () => {
    const backend = await open(freshNamespace());
    try {
      const at = new Date(Date.now() + HOUR);
      await backend.store.transact((tx) => tx.schedule('dup', at, msg('x', { n: 0 })));
      const before = (await backend.store.loadSchedule('dup'))!.version;
      const seen = await backend.store.transact(async (tx) => {
        await tx.schedule('dup', at, msg('x', { n: 1 }));
        await tx.schedule('other', at, msg('y'));
        await tx.schedule('dup', new Date(at.getTime() + 5), msg('x', { n: 2 }));
        return tx.loadSchedule('dup');
      });
      expect(seen?.message.data).toEqual({ n: 2 });
      expect(seen!.version).toBeGreaterThan(before);
      const after = await backend.store.loadSchedule('dup');
      expect(after).toMatchObject({ version: seen!.version, message: { data: { n: 2 } } });
      expect(after!.at.getTime()).toBe(at.getTime() + 5);
      expect((await backend.store.loadSchedule('other'))!.version).not.toBe(after!.version);
    } finally {
      await backend.close();
    }
  });

  it('writes nothing for a transaction that only puts and then throws', async () => {
    const backend = await open(freshNamespace());
    try {
      await expect(
        backend.store.transact(async (tx) => {
          for (let i = 0; i < 50; i++) await tx.schedule(`b/${i}`, new Date(Date.now() + HOUR), msg(`${i}`));
          throw new Error('no');
        }),
      ).rejects.toThrow('no');
      expect(await backend.store.listSchedules()).toEqual([]);
    } finally {
      await backend.close();
    }
  });
});

describe('store.join: inside a transaction the application began', () => {
  it('commits with the application, rolls back with it, and refuses a client outside a transaction', async () => {
    const { schema, pool, backend, orders } = await withAppTable();
    const client = await pool.connect();
    try {
      const at = new Date(Date.now() + HOUR);
      await client.query('BEGIN');
      await client.query(`INSERT INTO "${schema}".orders VALUES ('ORD-J', 'placed')`);
      await backend.store.join(client, (tx) => tx.schedule('join/kept', at, msg('ORD-J')));
      // Not committed yet: other sessions do not see it.
      expect(await backend.store.loadSchedule('join/kept')).toBeUndefined();
      await client.query('COMMIT');
      expect(await orders()).toEqual([{ id: 'ORD-J', status: 'placed' }]);
      expect((await backend.store.loadSchedule('join/kept'))?.at).toEqual(at);

      await client.query('BEGIN');
      await backend.store.join(client, (tx) => tx.schedule('join/dropped', at, msg('x')));
      await client.query('ROLLBACK');
      expect(await backend.store.loadSchedule('join/dropped')).toBeUndefined();

      // A failing function undoes only duetime's writes; the application's transaction goes on.
      await client.query('BEGIN');
      await client.query(`INSERT INTO "${schema}".orders VALUES ('ORD-K', 'placed')`);
      await expect(
        backend.store.join(client, async (tx) => {
          await tx.schedule('join/undone', at, msg('y'));
          throw new Error('no');
        }),
      ).rejects.toThrow('no');
      await client.query('COMMIT');
      expect((await orders()).map((o) => o.id)).toEqual(['ORD-J', 'ORD-K']);
      expect(await backend.store.loadSchedule('join/undone')).toBeUndefined();

      const outside = await backend.store.join(client, () => 1).catch((error: unknown) => error);
      expect(outside).toBeInstanceOf(InvalidArgumentError);
      expect((outside as InvalidArgumentError).field).toBe('handle');
    } finally {
      client.release();
      await backend.close();
      await pool.end();
    }
  });
});

describe('store.join: statements sent', () => {
  /** An executor on a client inside BEGIN that records every statement it sends. */
  function recording(client: pg.PoolClient, inTransaction?: () => boolean | undefined) {
    const sent: string[] = [];
    return {
      sent,
      executor: {
        async query(text: string, params: readonly unknown[]) {
          sent.push(text.trim().split(/\s+/)[0]!.toUpperCase());
          const result = await client.query(text, [...params]);
          return { rows: result.rows, rowCount: result.rowCount ?? 0 };
        },
        ...(inTransaction ? { inTransaction } : {}),
      },
    };
  }

  it('sends one statement for a one-statement join when the handle tells its state, a savepoint first otherwise', async () => {
    const { pool, backend } = await withAppTable();
    const client = await pool.connect();
    try {
      const at = new Date(Date.now() + HOUR);
      await client.query('BEGIN');
      const told = recording(client, () => client.getTransactionStatus() === 'T');
      await backend.store.join(told.executor, (tx) => tx.schedule('sent/one', at, msg('1')));
      // The put's function: its plan is kept by the session, unlike an unprepared INSERT's.
      expect(told.sent).toEqual(['SELECT']);
      // Several statements: a savepoint first, so a throwing function undoes them all.
      const several = recording(client, () => true);
      await expect(
        backend.store.join(several.executor, async (tx) => {
          await tx.schedule('sent/two', at, msg('2'));
          expect(await tx.cancelSchedule('sent/one')).toBe(true);
          throw new Error('undo both');
        }),
      ).rejects.toThrow('undo both');
      expect(several.sent[0]).toBe('SAVEPOINT');
      expect(several.sent.slice(-2)).toEqual(['ROLLBACK', 'RELEASE']);
      // A handle that cannot tell is probed with a savepoint.
      const probed = recording(client);
      await backend.store.join(probed.executor, (tx) => tx.schedule('sent/three', at, msg('3')));
      expect(probed.sent).toEqual(['SAVEPOINT', 'SELECT']);
      await client.query('COMMIT');
      const keys = (await backend.store.pageSchedules({ prefix: 'sent/' })).items.map((s) => s.key);
      expect(keys).toEqual(['sent/one', 'sent/three']);

      // A handle that says it is outside a transaction is refused before anything is sent.
      const outside = recording(client, () => false);
      const error = await backend.store
        .join(outside.executor, (tx) => tx.schedule('sent/never', at, msg('n')))
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe('handle');
      expect(outside.sent).toEqual([]);
      expect(await backend.store.loadSchedule('sent/never')).toBeUndefined();
    } finally {
      client.release();
      await backend.close();
      await pool.end();
    }
  });

  it('fails the application’s transaction when its one statement fails: nothing of either commits', async () => {
    const { schema, pool, backend, orders } = await withAppTable();
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO "${schema}".orders VALUES ('ORD-F', 'placed')`);
      // A statement that cannot succeed: a constraint, for this transaction only, that the row breaks.
      await client.query(
        `ALTER TABLE "${schema}".schedules ADD CONSTRAINT never_fail_one CHECK (key <> 'fail/one')`,
      );
      const failing = recording(client, () => client.getTransactionStatus() === 'T');
      await expect(
        backend.store.join(failing.executor, (tx) =>
          tx.schedule('fail/one', new Date(Date.now() + HOUR), msg('f')),
        ),
      ).rejects.toThrow(/never_fail_one/);
      expect(failing.sent).toEqual(['SELECT']);
      const commit = await client.query('COMMIT');
      expect(commit.command).toBe('ROLLBACK');
      expect(await orders()).toEqual([]);
      expect(await backend.store.loadSchedule('fail/one')).toBeUndefined();
    } finally {
      client.release();
      await backend.close();
      await pool.end();
    }
  });
});

describe('store.join: a transaction of another database', () => {
  it('refuses, naming the handle, a transaction on a database where the store does not exist; nothing is written', async () => {
    const { backend } = await withAppTable();
    // Another database on the same server (the `postgres` database every server has).
    const url = new URL(urlWithUser(PG_URL));
    url.pathname = '/postgres';
    const other = new pg.Client({ connectionString: url.toString() });
    await other.connect();
    try {
      await other.query('BEGIN');
      const refused = await backend.store
        .join(other, (tx) => tx.schedule('elsewhere/1', new Date(Date.now() + HOUR), msg('e')))
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(InvalidArgumentError);
      expect(refused).toMatchObject({ field: 'handle', code: 'DUETIME_INVALID_ARGUMENT' });
      expect(String((refused as Error).message)).toMatch(/another database/);
      await other.query('ROLLBACK');
      expect(await backend.store.loadSchedule('elsewhere/1')).toBeUndefined();
    } finally {
      await other.end();
      await backend.close();
    }
  });
});

describe('closing', () => {
  it('closes every connection it opened, is idempotent, and refuses calls afterwards', async () => {
    const applicationName = `dt-close-${randomBytes(3).toString('hex')}`;
    const backend = await open(freshNamespace(), { applicationName });
    const unwatch = backend.store.onChange(() => {});
    await backend.store.transact((tx) => tx.schedule('c/1', new Date(Date.now() + HOUR), msg('c')));
    await backend.leases.acquire('c', 'me', 10_000);
    const count = async () =>
      (
        await admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [
          applicationName,
        ])
      ).rows[0].n as number;
    await waitFor('the LISTEN connection to open', async () => (await count()) >= 2);
    unwatch();
    await Promise.all([backend.close(), backend.close()]);
    await backend.close();
    await waitFor('every connection to be gone', async () => (await count()) === 0);
    await expect(backend.store.loadSchedule('c/1')).rejects.toBeInstanceOf(ClosedError);
    await expect(backend.leases.holder('c')).rejects.toBeInstanceOf(ClosedError);
  });
});

describe('idleInTransactionTimeoutMs', () => {
  it('rejects a negative or non-numeric timeout, naming the option', async () => {
    for (const value of [-1, Number.NaN, '1000'] as unknown[]) {
      const error = await createPostgresBackend(
        { connectionString: PG_URL },
        { idleInTransactionTimeoutMs: value as number },
      ).catch((e: unknown) => e);
      expect(error).toMatchObject({
        code: 'DUETIME_INVALID_ARGUMENT',
        field: 'options.idleInTransactionTimeoutMs',
      });
    }
  });

  it('ends a transaction left idle past the timeout: its locks are released and it never commits', async () => {
    const schema = schemaFor(freshNamespace());
    const backend = await createPostgresBackend(
      { connectionString: urlWithUser(PG_URL) },
      { schema, idleInTransactionTimeoutMs: 300 },
    );
    try {
      await backend.store.transact(async (tx) => {
        await tx.sql.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY, status text NOT NULL)`);
      });
      // A process that freezes inside its transaction, holding the row it inserted.
      let inserted!: () => void;
      const holding = new Promise<void>((resolve) => {
        inserted = resolve;
      });
      const frozen = backend.store.transact(
        async (tx) => {
          await tx.sql.query(`INSERT INTO "${schema}".orders VALUES ('o1', 'frozen')`);
          inserted();
          await tx.schedule('frozen', new Date(Date.now() + HOUR), msg('o1'));
          await new Promise((resolve) => setTimeout(resolve, 1500));
        },
        { maxRetries: 0 },
      );
      const outcome = frozen.then(
        () => 'committed',
        (error: unknown) => error,
      );
      // Another writer of the same row waits for the frozen one, then goes through once the server ends it.
      await holding;
      await backend.store.transact(async (tx) => {
        await tx.sql.query(`INSERT INTO "${schema}".orders VALUES ('o1', 'placed')`);
      });
      const result = await outcome;
      expect(result).toBeInstanceOf(BackendError);
      expect((await admin.query(`SELECT status FROM "${schema}".orders`)).rows).toEqual([
        { status: 'placed' },
      ]);
      expect(await backend.store.loadSchedule('frozen')).toBeUndefined();
    } finally {
      await backend.close();
    }
  });
});
