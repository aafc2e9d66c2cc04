import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { createPostgresBackend } from '@duetime/backend-postgres';
import { createRedisBackend } from '@duetime/backend-redis';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { InvalidArgumentError } from '@duetime/core';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { type CliIo, MissingPackageError, parseBackendTarget, runCli } from '../src/index.js';
import { loadOptional } from '../src/optional.js';

const PG_URL = process.env.DUETIME_PG_URL ?? 'postgres://127.0.0.1:5432/test';
const REDIS_URL = process.env.DUETIME_REDIS_URL ?? 'redis://127.0.0.1:6379';
const dir = mkdtempSync(join(tmpdir(), 'duetime-cli-inspect-'));
const message = { type: 'order.expire', aggregateId: '1' };
const fresh = () => `cli${randomBytes(5).toString('hex')}`;

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function io(env: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const value: CliIo = {
    out: (t) => out.push(t),
    err: (t) => err.push(t),
    confirm: async () => false,
    env,
    cwd: dir,
    isTTY: false,
  };
  return { io: value, text: () => out.join('\n'), errors: () => err.join('\n') };
}

/** A URL with a query parameter added (the server's URL may carry its own). */
function withParam(url: string, name: string, value: string): string {
  const u = new URL(url);
  u.searchParams.set(name, value);
  return u.href;
}

describe('inspecting never creates a store', () => {
  it('answers a missing SQLite file with a NotFoundError and exit code 1, creating no file', async () => {
    const before = readdirSync(dir);
    const notFound = (why: string) =>
      `${why} (schedules commands never create a store; duetime run creates it) [DUETIME_NOT_FOUND]`;
    const t = io();
    expect(await runCli(['schedules', 'list'], t.io)).toBe(1);
    expect(t.text()).toBe('');
    expect(t.errors()).toBe(
      `duetime schedules: ${notFound(`no duetime database at ${join(dir, 'duetime.db')}: the file does not exist`)}`,
    );
    const json = io();
    expect(await runCli(['schedules', 'list', '--json', '--backend', 'sqlite:./other.db'], json.io)).toBe(1);
    expect(json.text()).toBe('');
    expect(json.errors()).toContain(`no duetime database at ${join(dir, 'other.db')}`);
    for (const args of [
      ['show', 'a/b'],
      ['cancel', '--prefix', 'a/'],
      ['cancel', 'a/b'],
      ['retry', 'a/b'],
      ['discard', 'a/b'],
      ['pause', 'a/b'],
      ['resume', 'a/b'],
      ['trigger', 'a/b'],
    ]) {
      const each = io();
      expect(await runCli(['schedules', ...args], each.io)).toBe(1);
      expect(each.text()).toBe('');
      expect(each.errors()).toContain('[DUETIME_NOT_FOUND]');
    }
    expect(readdirSync(dir)).toEqual(before);
    expect(existsSync(join(dir, 'duetime.db'))).toBe(false);
  });

  it('reads a SQLite store under a table prefix named in the URL, and counts honestly with --limit', async () => {
    const file = join(dir, 'prefixed.db');
    const backend = await createSqliteBackend({ filename: file }, { tablePrefix: 'app_' });
    await backend.store.transact(async (tx) => {
      for (let i = 1; i <= 5; i++) await tx.schedule(`k/${i}`, new Date(Date.UTC(2030, 0, i)), message);
    });
    await backend.close();
    const plain = io();
    expect(await runCli(['schedules', 'list', '--backend', `sqlite:${file}`], plain.io)).toBe(1);
    expect(plain.errors()).toContain('no duetime tables with the prefix "duetime_"');
    const limited = io();
    expect(
      await runCli(
        ['schedules', 'list', '--limit', '3', '--backend', `sqlite:${file}?tablePrefix=app_`],
        limited.io,
      ),
    ).toBe(0);
    expect(limited.text()).toContain('k/3');
    expect(limited.text()).not.toContain('k/4');
    expect(limited.text().split('\n').at(-1)).toBe('3 of 5 schedules shown (--limit 3)');
    const all = io();
    await runCli(['schedules', 'list', '--backend', `sqlite:${file}?tablePrefix=app_`], all.io);
    expect(all.text().split('\n').at(-1)).toBe('5 schedules');
  });

  it('refuses unknown URL parameters with a typed error listing the known ones', async () => {
    expect(() => parseBackendTarget('postgres://h/db?schem=x', dir)).toThrow(InvalidArgumentError);
    expect(() => parseBackendTarget('postgres://h/db?schem=x', dir)).toThrow(
      /unknown parameter "schem"; known parameters: schema, host/,
    );
    expect(() => parseBackendTarget('redis://h?schema=x', dir)).toThrow(/known parameters: prefix$/);
    expect(() => parseBackendTarget('nats://a:4222,b:4222?stream=x', dir)).toThrow(
      /known parameters: prefix$/,
    );
    expect(() => parseBackendTarget('sqlite:./a.db?prefix=x', dir)).toThrow(/known parameters: tablePrefix$/);
    expect(parseBackendTarget('postgres://u:pw@h/db?schema=app&sslmode=disable', dir)).toEqual({
      kind: 'postgres',
      display: 'postgres://u:***@h/db?schema=app&sslmode=disable',
      connectionString: 'postgres://u:pw@h/db?sslmode=disable',
      schema: 'app',
    });
    expect(parseBackendTarget('nats://a:4222,b:4222?prefix=shop', dir)).toMatchObject({
      servers: ['nats://a:4222', 'nats://b:4222'],
      prefix: 'shop',
    });
    const t = io();
    expect(await runCli(['schedules', 'list', '--backend', 'redis://127.0.0.1:1?db=2'], t.io)).toBe(3);
    expect(t.errors()).toContain('has the unknown parameter "db"');
  });

  it('inspects a PostgreSQL schema named in the URL, and creates no schema when there is none', async () => {
    const schema = fresh();
    const adminUrl = new URL(PG_URL);
    // Like libpq, the operating-system user when the URL names none.
    if (!adminUrl.username) adminUrl.username = process.env.PGUSER ?? userInfo().username;
    const admin = new pg.Client({ connectionString: adminUrl.href });
    await admin.connect();
    try {
      const url = withParam(PG_URL, 'schema', schema);
      const empty = io();
      expect(await runCli(['schedules', 'list', '--backend', url], empty.io)).toBe(1);
      expect(empty.errors()).toContain(`no duetime tables in schema "${schema}"`);
      expect(empty.errors()).toContain('[DUETIME_NOT_FOUND]');
      const found = await admin.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
      expect(found.rowCount).toBe(0);

      const backend = await createPostgresBackend({ connectionString: PG_URL }, { schema });
      await backend.store.transact((tx) => tx.schedule('pg/1', new Date('2030-01-01T00:00:00Z'), message));
      await backend.close();
      const listed = io();
      expect(await runCli(['schedules', 'list', '--backend', url], listed.io)).toBe(0);
      expect(listed.text()).toContain('pg/1');
      const elsewhere = io();
      await runCli(
        ['schedules', 'show', 'pg/1', '--backend', withParam(PG_URL, 'schema', fresh())],
        elsewhere.io,
      );
      expect(elsewhere.errors()).toContain('no duetime tables in schema');
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await admin.end();
    }
  });

  it('inspects a Redis store under a prefix named in the URL, writing no key when there is none', async () => {
    const prefix = fresh();
    const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    try {
      const url = withParam(REDIS_URL, 'prefix', prefix);
      const empty = io();
      expect(await runCli(['schedules', 'list', '--backend', url], empty.io)).toBe(1);
      expect(empty.errors()).toContain(`no duetime store with the prefix "${prefix}"`);
      expect(await admin.keys(`{${prefix}}:*`)).toEqual([]);
      const backend = await createRedisBackend({ url: REDIS_URL }, { prefix });
      await backend.store.transact((tx) => tx.schedule('redis/1', new Date('2030-01-01T00:00:00Z'), message));
      await backend.close();
      const listed = io();
      expect(await runCli(['schedules', 'list', '--json', '--backend', url], listed.io)).toBe(0);
      expect(JSON.parse(listed.text()).map((s: { key: string }) => s.key)).toEqual(['redis/1']);
    } finally {
      const keys = await admin.keys(`{${prefix}}:*`);
      if (keys.length > 0) await admin.del(...keys);
      admin.disconnect();
    }
  });
});

describe('clear messages', () => {
  it('marks a day whose local time a DST gap swallowed', async () => {
    const t = io();
    const args = [
      'next',
      '30 2 * * *',
      '--tz',
      'America/New_York',
      '--from',
      '2026-03-06T12:00:00Z',
      '-n',
      '3',
    ];
    expect(await runCli(args, t.io)).toBe(0);
    const lines = t.text().split('\n');
    expect(lines.filter((l) => /^2026-03-0[789]/.test(l)).map((l) => l.slice(0, 10))).toEqual([
      '2026-03-07',
      '2026-03-08',
      '2026-03-09',
    ]);
    expect(lines.find((l) => l.startsWith('2026-03-08'))).toContain(
      'skipped: this local time does not exist (DST gap)',
    );
    const json = io();
    await runCli([...args, '--json'], json.io);
    const parsed = JSON.parse(json.text());
    expect(parsed.occurrences).toHaveLength(3);
    expect(parsed.skipped).toEqual([
      { local: '2026-03-08 02:30:00 Sun', reason: 'skipped: this local time does not exist (DST gap)' },
    ]);
    // With the shift policy nothing is lost: no skipped row.
    const shifted = io();
    await runCli([...args, '--dst', 'shift', '--json'], shifted.io);
    expect(JSON.parse(shifted.text()).skipped).toBeUndefined();
  });

  it('names an unknown conformance group and lists the real ones, before running anything', async () => {
    const t = io();
    expect(await runCli(['conformance', './adapter.ts', '--only', 'leases,bogus'], t.io)).toBe(3);
    expect(t.errors()).toContain(
      'names the unknown group "bogus"; the groups are schedules, sharing, dispatcher',
    );
    expect(t.errors()).toContain('calendarFailover');
  });

  it('says where a module has a syntax error', async () => {
    const file = join(dir, 'broken-registry.ts');
    writeFileSync(file, "import { Registry } from '@duetime/core';\nexport const registry = new Registry(\n");
    const t = io();
    expect(await runCli(['describe', file], t.io)).toBe(3);
    expect(t.errors()).toContain('could not be loaded');
    expect(t.errors()).toMatch(/broken-registry\.ts:3/);
    expect(t.errors()).not.toContain('in a cycle');
  });

  it('names the package to install when an optional one is missing', async () => {
    const error = await loadOptional('@duetime/not-installed', 'the backend URL x://', dir).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(MissingPackageError);
    expect(error).toMatchObject({ packageName: '@duetime/not-installed', code: 'DUETIME_NOT_FOUND' });
    expect((error as Error).message).toContain('npm install @duetime/not-installed');
    const sub = await loadOptional('not-a-package-at-all/node', 'running', dir).catch((e: unknown) => e);
    expect(sub).toMatchObject({ packageName: 'not-a-package-at-all' });
  });
});
