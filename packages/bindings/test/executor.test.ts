import { InvalidArgumentError } from '@duetime/core';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { arraysAsLiterals, questionMarks } from '../src/executor.js';
import { LIBRARIES, type Library } from './libraries.js';
import { reachablePool } from './server.js';

const table = `bindings_probe_${process.pid}`;
let admin: pg.Pool;

beforeAll(async () => {
  admin = await reachablePool(2);
  await admin.query(`CREATE TABLE IF NOT EXISTS ${table} (id text PRIMARY KEY, n integer)`);
});

afterAll(async () => {
  await admin.query(`DROP TABLE IF EXISTS ${table}`);
  await admin.end();
});

async function ids(prefix: string): Promise<string[]> {
  const { rows } = await admin.query<{ id: string }>(`SELECT id FROM ${table} WHERE id LIKE $1 ORDER BY id`, [
    `${prefix}%`,
  ]);
  return rows.map((r) => r.id);
}

describe.each(Object.keys(LIBRARIES))('the %s binding', (name) => {
  let library: Library;
  const prefix = `${name.replace(/\W+/g, '-')}/`;

  beforeAll(async () => {
    library = await LIBRARIES[name]!();
  });
  afterAll(() => library?.close());

  it('runs statements with parameters inside the library’s transaction: rows, counts and repeated parameters', async () => {
    const result = await library.transaction(async (executor) => {
      const inserted = await executor.query(
        `INSERT INTO ${table} (id, n) VALUES ($1, $2), ($3, $2) RETURNING id, n`,
        [`${prefix}a`, 7, `${prefix}b`],
      );
      const updated = await executor.query(`UPDATE ${table} SET n = n + 1 WHERE id LIKE $1`, [`${prefix}%`]);
      const selected = await executor.query(
        `SELECT count(*)::int AS c, $1::text AS echo FROM ${table} WHERE id LIKE $1`,
        [`${prefix}%`],
      );
      return { inserted, updated, selected };
    });
    expect(result.inserted.rowCount).toBe(2);
    expect(result.inserted.rows.map((r) => [r.id, r.n])).toEqual([
      [`${prefix}a`, 7],
      [`${prefix}b`, 7],
    ]);
    expect(result.updated.rowCount).toBe(2);
    expect(result.selected.rows).toEqual([{ c: 2, echo: `${prefix}%` }]);
    expect(await ids(prefix)).toEqual([`${prefix}a`, `${prefix}b`]);
  });

  it('passes dollar signs that are not parameters through unchanged ($$-quoted text, $name)', async () => {
    const result = await library.transaction((executor) =>
      executor.query(`SELECT $1::text AS p, '$$ $name a$b' AS s, $$it's$$ AS q, $tag$x$tag$ AS t`, ['v']),
    );
    expect(result.rows).toEqual([{ p: 'v', s: '$$ $name a$b', q: "it's", t: 'x' }]);
  });

  it('rolls back with the library: what went through the executor is gone, savepoints nest', async () => {
    const failure = new Error('the application changed its mind');
    await expect(
      library.transaction(async (executor) => {
        await executor.query(`INSERT INTO ${table} (id, n) VALUES ($1, 1)`, [`${prefix}rolled`]);
        throw failure;
      }),
    ).rejects.toBe(failure);
    await library.transaction(async (executor) => {
      await executor.query('SAVEPOINT inner_part', []);
      await executor.query(`INSERT INTO ${table} (id, n) VALUES ($1, 1)`, [`${prefix}undone`]);
      await executor.query('ROLLBACK TO SAVEPOINT inner_part', []);
      await executor.query('RELEASE SAVEPOINT inner_part', []);
      await executor.query(`INSERT INTO ${table} (id, n) VALUES ($1, 1)`, [`${prefix}kept`]);
    });
    const left = await ids(prefix);
    expect(left).toContain(`${prefix}kept`);
    expect(left).not.toContain(`${prefix}rolled`);
    expect(left).not.toContain(`${prefix}undone`);
  });

  it('refuses a handle that is not an open transaction with an InvalidArgumentError naming handle', async () => {
    for (const handle of await library.notTransactions()) {
      let error: unknown;
      try {
        library.bind(handle);
      } catch (e) {
        error = e;
      }
      expect(error, `binding ${String(handle)}`).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).message).toMatch(/handle/);
    }
  });
});

describe('questionMarks (Knex)', () => {
  it('rewrites $n in order of appearance, repeating reused parameters and escaping literal ?', () => {
    expect(questionMarks("SELECT $2, $1, $2, '?'", ['a', 'b'])).toEqual({
      text: "SELECT ?, ?, ?, '\\?'",
      bindings: ['b', 'a', 'b'],
    });
    expect(() => questionMarks('SELECT $3', [1])).toThrow(InvalidArgumentError);
  });
});

describe('arraysAsLiterals (postgres.js, Drizzle)', () => {
  it('writes arrays as PostgreSQL array literals, quoting and escaping text, leaving other values alone', () => {
    expect(arraysAsLiterals([['a', 'b"c', 'd\\e', null], [1, 2n, true], 'x', 5])).toEqual([
      '{"a","b\\"c","d\\\\e",NULL}',
      '{1,2,true}',
      'x',
      5,
    ]);
  });
});
