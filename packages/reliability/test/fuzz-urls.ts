import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DuetimeError, describeValue, MAX_TIMER_MS } from '@duetime/core';
import fc from 'fast-check';
import { durationLike, hostileText, hostileValue } from '../src/arbitraries.js';
import { type BackendName, hostAndPort, serviceUrl, type TargetSpec, withUser } from '../src/targets.js';

/** One fuzzed attempt at opening a backend: the factory's two arguments. */
export interface FuzzedOpen {
  kind: BackendName;
  connection: unknown;
  options: unknown;
}

/** Opens with the factory of `kind`; resolves when it opened (then closed) or threw a DuetimeError. */
export async function openFuzzedBackend(fuzzed: FuzzedOpen): Promise<void> {
  let backend: { close(): Promise<void> } | undefined;
  try {
    switch (fuzzed.kind) {
      case 'sqlite': {
        const { createSqliteBackend } = await import('@duetime/backend-sqlite');
        backend = await createSqliteBackend(fuzzed.connection as never, fuzzed.options as never);
        break;
      }
      case 'postgres': {
        const { createPostgresBackend } = await import('@duetime/backend-postgres');
        backend = await createPostgresBackend(fuzzed.connection as never, fuzzed.options as never);
        break;
      }
      case 'redis': {
        const { createRedisBackend } = await import('@duetime/backend-redis');
        backend = await createRedisBackend(fuzzed.connection as never, fuzzed.options as never);
        break;
      }
      case 'nats': {
        const { openNatsFuzzed } = await import('../src/nats-target.js');
        backend = await openNatsFuzzed(fuzzed.connection, fuzzed.options);
        break;
      }
    }
  } catch (error) {
    if (error instanceof DuetimeError) return;
    throw new Error(`opening ${describeValue(fuzzed)} threw an untyped error: ${String(error)}`, {
      cause: error,
    });
  }
  await backend?.close();
}

/** Removes what successful fuzzed opens created: PostgreSQL schemas and Redis keys under made-up names. */
export async function dropFuzzedData(kind: BackendName): Promise<void> {
  if (kind === 'postgres') {
    const { default: pg } = await import('pg');
    const admin = new pg.Client({ connectionString: withUser(serviceUrl('postgres')) });
    await admin.connect();
    try {
      const found = await admin.query('SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)', [
        FUZZ_SCHEMA_PREFIX,
      ]);
      for (const row of found.rows) await admin.query(`DROP SCHEMA IF EXISTS "${row.nspname}" CASCADE`);
    } finally {
      await admin.end();
    }
  }
  if (kind === 'redis') {
    const { Redis } = await import('ioredis');
    const admin = new Redis(serviceUrl('redis'), { maxRetriesPerRequest: 1 });
    try {
      for (const db of [0, 15]) {
        await admin.select(db);
        let cursor = '0';
        do {
          const [next, keys] = await admin.scan(cursor, 'MATCH', '*relfz*', 'COUNT', 1000);
          cursor = next;
          if (keys.length > 0) await admin.unlink(...keys);
        } while (cursor !== '0');
      }
    } finally {
      admin.disconnect();
    }
  }
}

/**
 * A timeout that is either refused at once (bad value) or short enough to keep the run bounded. Valid long
 * timeouts are left out: an open that cannot finish (TLS to a plaintext server) rightly waits that long.
 * Values above MAX_TIMER_MS are kept: they must be refused (found by this fuzzing: Node fired a
 * `connectTimeout` of 2^53 ms at once, or, for a socket timeout, after 24.8 days).
 */
const timeoutLike = fc.oneof(
  fc.integer({ min: 50, max: 3000 }),
  durationLike.filter((v) => !(typeof v === 'number' && v > 3000 && v <= MAX_TIMER_MS)),
);
const loopback = fc.constantFrom('127.0.0.1', 'localhost', '[::1]', '127.1');

/** A host: loopback in its spellings, or text that is no host at all (never a real remote name). */
const hostLike = fc.oneof({ weight: 4, arbitrary: loopback }, { weight: 1, arbitrary: hostileText(8) });

/** Made-up schema names that may be valid: those a successful open creates are dropped afterwards. */
export const FUZZ_SCHEMA_PREFIX = `relfz${process.pid}_`;

/** Fuzzed factory arguments for `kind`, around the real server of `target`. */
export function urlCases(kind: BackendName, target: TargetSpec): fc.Arbitrary<FuzzedOpen> {
  switch (kind) {
    case 'sqlite': {
      const dir = mkdtempSync(join(tmpdir(), 'duetime-fuzz-'));
      const name = hostileText(20).filter((s) => !s.split('/').includes('..'));
      return fc.record({
        kind: fc.constant(kind),
        connection: fc.oneof(
          { weight: 4, arbitrary: name.map((n) => ({ filename: join(dir, n) })) },
          {
            weight: 1,
            arbitrary: fc.constantFrom({ filename: ':memory:' }, { filename: dir }, { database: {} }),
          },
          { weight: 1, arbitrary: hostileValue },
        ),
        options: fc.oneof(
          fc.record(
            {
              busyTimeoutMs: timeoutLike,
              tablePrefix: fc.oneof(fc.constantFrom('duetime_', 'x_', '_', '9a', 'a-b'), hostileText(40)),
              watchIntervalMs: timeoutLike,
              synchronous: fc.oneof(fc.constantFrom('full', 'normal', 'off', 'FULL'), hostileValue),
            },
            { requiredKeys: [] },
          ),
          hostileValue,
        ),
      });
    }
    case 'postgres': {
      const { port } = hostAndPort((target as { url: string }).url);
      const url = fc
        .record({
          scheme: fc.constantFrom('postgres://', 'postgresql://', 'postgres:', 'mysql://', ''),
          user: fc.oneof(
            fc.constantFrom('', 'postgres@', 'nobody@', ':@', 'a:b@'),
            hostileText(6).map((u) => `${u}@`),
          ),
          host: hostLike,
          port: fc.oneof(
            fc.constantFrom(`:${port}`, `:${port}`, ':1', ':0', ':65536', ''),
            hostileText(4).map((p) => `:${p}`),
          ),
          db: fc.oneof(
            fc.constantFrom('/test', '/test', '/nosuchdb', '', '/'),
            hostileText(8).map((d) => `/${d}`),
          ),
          query: fc.oneof(
            fc.constantFrom('', '', '?sslmode=disable', '?sslmode=require', '?options=-c%20x'),
            hostileText(8),
          ),
        })
        .map((p) => `${p.scheme}${p.user}${p.host}${p.port}${p.db}${p.query}`);
      return fc.record({
        kind: fc.constant(kind),
        connection: fc.oneof(
          { weight: 5, arbitrary: url.map((connectionString) => ({ connectionString })) },
          { weight: 1, arbitrary: fc.oneof(hostileValue, fc.constant({ pool: {} })) },
        ),
        options: fc.oneof(
          fc.record(
            {
              schema: fc.oneof(
                fc.stringMatching(/^[a-z]{1,8}$/).map((s) => `${FUZZ_SCHEMA_PREFIX}${s}`),
                fc.constantFrom('pg_catalog', 'pg_toast', '1abc', 'a"b', 'x'.repeat(64)),
                // A valid name is prefixed, so that nothing lands in a schema this run does not own.
                hostileText(12).map((s) =>
                  /^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? `${FUZZ_SCHEMA_PREFIX}${s}` : s,
                ),
              ),
              poolSize: fc.oneof(fc.integer({ min: 1, max: 4 }), durationLike),
              connectTimeoutMs: timeoutLike,
              applicationName: fc.oneof(fc.constant('duetime-fuzz'), hostileText(20)),
              migrate: fc.oneof(fc.boolean(), hostileValue),
            },
            { requiredKeys: ['connectTimeoutMs'] },
          ),
          hostileValue,
        ),
      });
    }
    case 'redis': {
      const { port } = hostAndPort((target as { url: string }).url);
      const url = fc
        .record({
          scheme: fc.constantFrom('redis://', 'rediss://', 'redis:', 'http://', ''),
          user: fc.oneof(
            fc.constantFrom('', '', ':wrong@', 'default:@', 'nobody:x@'),
            hostileText(6).map((u) => `${u}@`),
          ),
          host: hostLike,
          port: fc.oneof(
            fc.constantFrom(`:${port}`, `:${port}`, ':1', ':0', ''),
            hostileText(4).map((p) => `:${p}`),
          ),
          db: fc.oneof(
            fc.constantFrom('', '/0', '/15', '/16', '/-1', '/x', '/1/2'),
            hostileText(6).map((d) => `/${d}`),
          ),
        })
        .map((p) => `${p.scheme}${p.user}${p.host}${p.port}${p.db}`);
      return fc.record({
        kind: fc.constant(kind),
        connection: fc.oneof(
          { weight: 5, arbitrary: url.map((u) => ({ url: u })) },
          { weight: 1, arbitrary: fc.oneof(hostileValue, fc.constant({ client: {} })) },
        ),
        options: fc.oneof(
          fc.record(
            {
              prefix: fc.oneof(
                fc.stringMatching(/^[a-z]{1,8}$/).map((s) => `relfz${s}`),
                hostileText(70),
              ),
              connectTimeoutMs: timeoutLike,
              startupTimeoutMs: timeoutLike,
              requestTimeoutMs: timeoutLike,
              commitTimeoutMs: timeoutLike,
              claims: fc.oneof(fc.boolean(), fc.record({ ttlMs: durationLike }), hostileValue),
            },
            { requiredKeys: ['connectTimeoutMs', 'startupTimeoutMs'] },
          ),
          hostileValue,
        ),
      });
    }
    case 'nats': {
      const { port } = hostAndPort((target as { url: string }).url);
      const url = fc
        .record({
          scheme: fc.constantFrom('nats://', 'tls://', 'ws://', 'nats:', ''),
          host: hostLike,
          port: fc.oneof(
            fc.constantFrom(`:${port}`, `:${port}`, ':1', ''),
            hostileText(4).map((p) => `:${p}`),
          ),
        })
        .map((p) => `${p.scheme}${p.host}${p.port}`);
      return fc.record({
        kind: fc.constant(kind),
        connection: fc.oneof(
          {
            weight: 5,
            arbitrary: fc.oneof(url, fc.array(url, { maxLength: 3 })).map((servers) => ({ servers })),
          },
          { weight: 1, arbitrary: hostileValue },
        ),
        options: fc.oneof(
          fc.record(
            {
              prefix: fc.oneof(
                fc.stringMatching(/^[a-z]{1,8}$/).map((s) => `relfz${s}`),
                hostileText(40),
              ),
              connectTimeoutMs: timeoutLike,
            },
            { requiredKeys: ['connectTimeoutMs'] },
          ),
          hostileValue,
        ),
      });
    }
  }
}
