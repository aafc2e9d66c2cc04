import { randomBytes } from 'node:crypto';
import { BackendError, InvalidArgumentError, type Logger, NotFoundError } from '@duetime/core';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createRedisBackend } from '../src/index.js';
import { assertRedisReachable } from './adapter.js';
import { duetimeClientIds, message, redisFixture, redisUrl, waitFor } from './helpers.js';

const fx = redisFixture();

/** The test server's URL with `user:password@` put in. */
function urlWithLogin(user: string, password: string): string {
  const url = new URL(redisUrl);
  url.username = user;
  url.password = password;
  return url.href;
}

/** A closed local port: a listener opened and closed again. */
async function closedPort(): Promise<number> {
  const { createServer } = await import('node:net');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('configuration errors', () => {
  it.each([
    ['', 'connection.url'],
    ['not a url', 'connection.url'],
    ['http://127.0.0.1:6379', 'connection.url'],
    ['redis://127.0.0.1:6379/abc', 'connection.url'],
    ['redis://', 'connection.url'],
    // A malformed escape in the login (found by the reliability suite: ioredis threw a URIError).
    ['redis://%@127.0.0.1:6379', 'connection.url'],
    ['redis://user:%zz@127.0.0.1:6379', 'connection.url'],
  ])('rejects the URL %j naming %s', async (url, field) => {
    const error = await createRedisBackend({ url }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ code: 'DUETIME_INVALID_ARGUMENT', field });
  });

  it('never shows a password in a URL error', async () => {
    const error = (await createRedisBackend({ url: 'http://user:hunter2@host:6379' }).catch(
      (e) => e,
    )) as Error;
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).not.toContain('hunter2');
    expect(error.message).toContain('***');
  });

  it.each([
    [{ prefix: '' }, 'options.prefix'],
    [{ prefix: 'a{b}' }, 'options.prefix'],
    [{ prefix: 'has space' }, 'options.prefix'],
    [{ prefix: 'x'.repeat(65) }, 'options.prefix'],
    [{ prefix: 7 }, 'options.prefix'],
    [{ connectTimeoutMs: -1 }, 'options.connectTimeoutMs'],
    [{ startupTimeoutMs: Number.NaN }, 'options.startupTimeoutMs'],
    [{ claims: { ttlMs: 0 } }, 'options.claims.ttlMs'],
    [{ claims: 'yes' }, 'options.claims'],
    [{ commitTimeoutMs: -5 }, 'options.commitTimeoutMs'],
    [{ migrate: 'no' }, 'options.migrate'],
    // Longer than a Node.js timer keeps: it would fire after 1 ms.
    [{ connectTimeoutMs: 2 ** 31 }, 'options.connectTimeoutMs'],
    [{ startupTimeoutMs: 2 ** 31 }, 'options.startupTimeoutMs'],
    [{ requestTimeoutMs: 2 ** 31 }, 'options.requestTimeoutMs'],
    [{ claims: { ttlMs: 2 ** 31 } }, 'options.claims.ttlMs'],
    // The old names are still checked, under the name given.
    [{ connectTimeout: -1 }, 'options.connectTimeoutMs'],
    [{ claims: { ttl: 0 } }, 'options.claims.ttl'],
    [{ connectTimeout: 1, connectTimeoutMs: 1 }, 'options.connectTimeout'],
  ])('rejects options %j naming %s', async (options, field) => {
    const error = await createRedisBackend({ url: redisUrl }, options as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe(field);
  });

  it('rejects a client or options with an ioredis keyPrefix (it would prefix only some keys)', async () => {
    const prefixed = new Redis(redisUrl, { keyPrefix: 'app:', lazyConnect: true });
    try {
      await expect(createRedisBackend({ client: prefixed })).rejects.toMatchObject({
        field: 'connection.client',
      });
    } finally {
      prefixed.disconnect();
    }
    await expect(
      createRedisBackend({ url: redisUrl }, { redisOptions: { keyPrefix: 'app:' } }),
    ).rejects.toMatchObject({ field: 'options.redisOptions.keyPrefix' });
  });

  it('rejects a connection that is neither a URL nor an ioredis client', async () => {
    await expect(createRedisBackend({ client: {} as never })).rejects.toMatchObject({
      field: 'connection.client',
    });
    await expect(createRedisBackend(null as never)).rejects.toMatchObject({ field: 'connection' });
  });
});

describe('unreachable or refusing servers', () => {
  it('fails with a BackendError naming host and port when the connection is refused', async () => {
    const port = await closedPort();
    const error = (await createRedisBackend({ url: `redis://127.0.0.1:${port}` }).catch(
      (e) => e,
    )) as BackendError;
    expect(error).toBeInstanceOf(BackendError);
    expect(error.transient).toBe(true);
    expect(error.message).toContain(`127.0.0.1:${port}`);
    expect(error.message).toMatch(/ECONNREFUSED/);
  });

  it('fails with a BackendError when the host does not resolve', async () => {
    const error = (await createRedisBackend({ url: 'redis://duetime-no-such-host.invalid:6379' }).catch(
      (e) => e,
    )) as BackendError;
    expect(error).toBeInstanceOf(BackendError);
    expect(error.message).toContain('duetime-no-such-host.invalid:6379');
  });

  it('fails on a wrong password, naming the server and the user but never the password', async () => {
    await assertRedisReachable();
    const user = `duetime_test_${randomBytes(4).toString('hex')}`;
    const secret = randomBytes(8).toString('hex');
    await fx.admin.call('ACL', 'SETUSER', user, 'on', `>${secret}`, '~*', '&*', '+@all');
    try {
      const wrong = `wrong-${randomBytes(4).toString('hex')}`;
      const error = (await createRedisBackend({ url: urlWithLogin(user, wrong) }).catch(
        (e) => e,
      )) as BackendError;
      expect(error).toBeInstanceOf(BackendError);
      expect(error.transient).toBe(false);
      expect(error.message).toMatch(/WRONGPASS/);
      expect(error.message).toContain(user);
      expect(error.message).not.toContain(wrong);

      // The same user with the right password works, through the URL and through the application's client.
      const prefix = fx.prefix();
      const backend = await fx.open(prefix, {});
      await backend.store.transact((tx) => tx.schedule('auth/ok', new Date(), message('a')));
      const viaUrl = fx.closeLater(await createRedisBackend({ url: urlWithLogin(user, secret) }, { prefix }));
      expect((await viaUrl.store.loadSchedule('auth/ok'))?.version).toBe(1);

      const appClient = new Redis(urlWithLogin(user, wrong), { lazyConnect: true, maxRetriesPerRequest: 1 });
      appClient.on('error', () => {});
      try {
        const refused = (await createRedisBackend({ client: appClient }, { prefix }).catch(
          (e) => e,
        )) as Error;
        expect(refused).toBeInstanceOf(BackendError);
        expect(refused.message).toMatch(/WRONGPASS|NOAUTH/);
        expect(refused.message).not.toContain(wrong);
      } finally {
        appClient.disconnect();
      }
    } finally {
      await fx.admin.call('ACL', 'DELUSER', user);
    }
  });

  it('bounds the first command on an application client that cannot connect', async () => {
    const port = await closedPort();
    const appClient = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: null });
    appClient.on('error', () => {});
    try {
      const error = (await createRedisBackend({ client: appClient }, { startupTimeoutMs: 500 }).catch(
        (e) => e,
      )) as BackendError;
      expect(error).toBeInstanceOf(BackendError);
      expect(error.message).toContain(`127.0.0.1:${port}`);
      expect(error.message).toMatch(/did not answer within 500 ms/);
    } finally {
      appClient.disconnect();
    }
  });
});

describe('the application’s own client', () => {
  it('uses it without closing it, and close() is idempotent', async () => {
    await assertRedisReachable();
    const appClient = new Redis(redisUrl);
    try {
      const prefix = fx.prefix();
      const backend = await createRedisBackend({ client: appClient }, { prefix });
      await backend.store.transact((tx) => tx.schedule('app/1', new Date(), message('a')));
      const stop = backend.store.onChange(() => {});
      await backend.close();
      await backend.close();
      stop();
      expect(await appClient.ping()).toBe('PONG');
      expect(await appClient.hexists(`{${prefix}}:schedules`, 'app/1')).toBe(1);
      await expect(backend.store.loadSchedule('app/1')).rejects.toMatchObject({ code: 'DUETIME_CLOSED' });
      await expect(backend.leases.acquire('l', 'o', 1000)).rejects.toMatchObject({ code: 'DUETIME_CLOSED' });
    } finally {
      appClient.disconnect();
    }
  });

  it('closes the connections it created, including the change subscriber', async () => {
    const prefix = fx.prefix();
    const backend = await createRedisBackend({ url: redisUrl }, { prefix });
    backend.store.onChange(() => {});
    await waitFor('both connections', async () => (await duetimeClientIds(fx.admin, prefix)).length === 2);
    await backend.close();
    await waitFor('no connections', async () => (await duetimeClientIds(fx.admin, prefix)).length === 0);
  });
});

describe('migrate: false and renamed options', () => {
  it('refuses a prefix nothing was written under, writing no key, and opens one in use', async () => {
    const prefix = fx.prefix();
    const error = await fx.open(prefix, { migrate: false }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NotFoundError);
    expect((error as Error).message).toContain(`no duetime store with the prefix "${prefix}"`);
    expect(await fx.admin.keys(`{${prefix}}:*`)).toEqual([]);
    const writer = await fx.open(prefix);
    await writer.store.transact((tx) => tx.schedule('k/1', new Date('2030-01-01T00:00:00Z'), message('1')));
    const reader = await fx.open(prefix, { migrate: false });
    expect((await reader.store.listSchedules()).map((s) => s.key)).toEqual(['k/1']);
    // A store used only for leases (a calendar scheduler) is found too.
    const leasesOnly = fx.prefix();
    const scheduler = await fx.open(leasesOnly);
    await scheduler.leases.acquire('group', 'me', 10_000);
    await expect(fx.open(leasesOnly, { migrate: false })).resolves.toBeDefined();
  });

  it('reads the old option names with one deprecation warning each', async () => {
    const warnings: string[] = [];
    const logger: Logger = { debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
    await fx.open(fx.prefix(), {
      logger,
      connectTimeout: 3000,
      startupTimeout: 5000,
      commandTimeout: 5000,
      commitRetryWindow: 1000,
      claims: { ttl: 2000 },
    });
    const deprecated = warnings.filter((w) => w.includes('is deprecated'));
    expect(deprecated.map((w) => /options\.(\S+) is deprecated/.exec(w)?.[1])).toEqual([
      'connectTimeout',
      'startupTimeout',
      'commandTimeout',
      'commitRetryWindow',
      'claims.ttl',
    ]);
    expect(deprecated.find((w) => w.includes('options.commandTimeout'))).toContain(
      'options.requestTimeoutMs',
    );
  });
});
