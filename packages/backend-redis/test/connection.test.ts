import { randomBytes } from 'node:crypto';
import { BackendError, InvalidArgumentError } from '@duetime/core';
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
    [{ connectTimeout: -1 }, 'options.connectTimeout'],
    [{ startupTimeout: Number.NaN }, 'options.startupTimeout'],
    [{ claims: { ttl: 0 } }, 'options.claims.ttl'],
    [{ claims: 'yes' }, 'options.claims'],
    [{ commitRetryWindow: -5 }, 'options.commitRetryWindow'],
    // Longer than a Node.js timer keeps: it would fire after 1 ms.
    [{ connectTimeout: 2 ** 31 }, 'options.connectTimeout'],
    [{ startupTimeout: 2 ** 31 }, 'options.startupTimeout'],
    [{ commandTimeout: 2 ** 31 }, 'options.commandTimeout'],
    [{ claims: { ttl: 2 ** 31 } }, 'options.claims.ttl'],
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
      const error = (await createRedisBackend({ client: appClient }, { startupTimeout: 500 }).catch(
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
