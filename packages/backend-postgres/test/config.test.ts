import { InvalidArgumentError, type Logger } from '@duetime/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend, migrate } from '../src/index.js';
import { dropSchemas, PG_URL, rejection, schemaFor } from './adapter.js';

describe('configuration errors', () => {
  it.each([
    ['not a url', /not a URL/],
    ['mysql://u@h/db', /expected postgres: or postgresql:/],
    ['', /must be a URL/],
    ['postgres:///nohost', /no host/],
    // WHATWG reads these, pg's own parser does not (found by the hostile-input suite).
    ['postgres://[::1]:5432/ ', /cannot be read by pg/],
    ['postgres://u:p%zz@[::1]:5432/test', /cannot be read by pg/],
  ])('rejects the connection string %j with an InvalidArgumentError naming it', async (url, reason) => {
    const error = await rejection(createPostgresBackend({ connectionString: url }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe('connection.connectionString');
    expect(error.message).toMatch(reason);
  });

  it('never shows the password of a rejected URL', async () => {
    const error = await rejection(createPostgresBackend({ connectionString: 'mysql://bob:hunter2@h:1/db' }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).not.toContain('hunter2');
    expect(String((error as InvalidArgumentError).value)).not.toContain('hunter2');
    expect(error.message).toContain('bob:***@');
  });

  it.each([
    [{ schema: '' }, 'options.schema'],
    [{ schema: 'has space' }, 'options.schema'],
    [{ schema: '1abc' }, 'options.schema'],
    [{ schema: 'pg_mine' }, 'options.schema'],
    [{ schema: 'x'.repeat(64) }, 'options.schema'],
    [{ schema: 'semi;colon' }, 'options.schema'],
    [{ poolSize: 0 }, 'options.poolSize'],
    [{ poolSize: 2.5 }, 'options.poolSize'],
    [{ connectTimeoutMs: -1 }, 'options.connectTimeoutMs'],
    [{ connectTimeoutMs: 2 ** 31 }, 'options.connectTimeoutMs'],
    [{ migrate: 'yes' }, 'options.migrate'],
    [{ applicationName: 'bad\nname' }, 'options.applicationName'],
    [{ clock: {} }, 'options.clock'],
    [{ logger: 1 }, 'options.logger'],
    [{ preparedStatements: 'no' }, 'options.preparedStatements'],
  ])('rejects option %j naming %s, before connecting', async (options, field) => {
    const error = await rejection(
      createPostgresBackend({ connectionString: 'postgres://127.0.0.1:1/none' }, options as never),
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe(field);
  });

  it('rejects a connection that is neither a URL nor a pool', async () => {
    for (const bad of [null, 'postgres://x/y', {}, { pool: {} }, { pool: { query() {} } }]) {
      const error = await rejection(createPostgresBackend(bad as never));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toMatch(/^connection/);
    }
    const error = await rejection(migrate({ connectionString: 'nope' }));
    expect((error as InvalidArgumentError).field).toBe('connection.connectionString');
  });

  it('does not end a pool it was given when option validation fails', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://127.0.0.1:1/none' });
    await rejection(createPostgresBackend({ pool }, { schema: 'bad schema' }));
    expect(pool.ended).toBe(false);
    await pool.end();
  });
});

describe('renamed options', () => {
  afterAll(dropSchemas);

  it('reads connectionTimeoutMs as connectTimeoutMs with a deprecation warning, and refuses both', async () => {
    const warnings: string[] = [];
    const logger: Logger = { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
    const backend = await createPostgresBackend(
      { connectionString: PG_URL },
      { schema: schemaFor('renamed'), connectionTimeoutMs: 5000, logger },
    );
    await backend.close();
    expect(warnings).toEqual([expect.stringContaining('options.connectionTimeoutMs is deprecated')]);
    expect(warnings[0]).toContain('use options.connectTimeoutMs');
    const error = await rejection(
      createPostgresBackend(
        { connectionString: 'postgres://127.0.0.1:1/none' },
        { connectionTimeoutMs: 5, connectTimeoutMs: 5 },
      ),
    );
    expect((error as InvalidArgumentError).field).toBe('options.connectionTimeoutMs');
  });
});
