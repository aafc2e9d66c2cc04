import { createServer, type Server } from 'node:net';
import { freshNamespace } from '@duetime/conformance';
import { BackendError, InvalidArgumentError, NotSupportedError } from '@duetime/core';
import { freePort } from '@duetime/testing';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { afterAll, describe, expect, it } from 'vitest';
import {
  connectNats,
  createNatsBackend,
  createNatsCoordination,
  deleteNatsBackendData,
  LegacyStoreError,
  type NatsTarget,
  StreamMismatchError,
} from '../src/index.js';
import { NATS_STORE_URL, NATS_URL } from './adapter.js';

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
}

describe('createNatsBackend: bad input and unreachable servers', () => {
  const prefixes: string[] = [];
  afterAll(async () => {
    for (const url of [NATS_URL, NATS_STORE_URL]) {
      const nc = await connectNats(url);
      for (const prefix of prefixes) await deleteNatsBackendData(nc, prefix).catch(() => {});
      await nc.close();
    }
  });

  it.each([
    ['http://127.0.0.1:4222', 'servers', /scheme "http"/],
    ['', 'servers', /non-empty URL/],
    ['nats://127.0.0.1:99999', 'servers', /valid URL/],
    ['nats://127.0.0.1:4222/path', 'servers', /path/],
    [42, 'servers', /URL string/],
    [[], 'servers', /at least one/],
    [['nats://127.0.0.1:4222', 'ftp://x'], 'servers[1]', /scheme "ftp"/],
  ])('rejects servers %j with an InvalidArgumentError naming %s', async (servers, field, reason) => {
    const error = await rejection(createNatsBackend({ servers } as NatsTarget));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ code: 'DUETIME_INVALID_ARGUMENT', field });
    expect((error as Error).message).toMatch(reason);
  });

  it('masks the password of a rejected URL', async () => {
    const error = await rejection(createNatsBackend({ servers: 'nats://app:s3cret@127.0.0.1:notaport' }));
    expect(error).toMatchObject({ field: 'servers', value: 'nats://app:***@127.0.0.1:notaport' });
    expect((error as Error).message).not.toContain('s3cret');
  });

  it.each([
    [{ prefix: 'a.b' }, 'options.prefix'],
    [{ prefix: '' }, 'options.prefix'],
    [{ prefix: 'x'.repeat(33) }, 'options.prefix'],
    [{ prefix: 'a>' }, 'options.prefix'],
    [{ requestTimeoutMs: -1 }, 'options.requestTimeoutMs'],
    [{ commitTimeoutMs: 1.5 }, 'options.commitTimeoutMs'],
    [{ stallMs: 0 }, 'options.stallMs'],
    [{ replicas: 0 }, 'options.replicas'],
    [{ prefixx: 'typo' }, 'options.prefixx'],
    // Longer than a Node.js timer keeps: it would fire after 1 ms.
    [{ requestTimeoutMs: 2 ** 31 }, 'options.requestTimeoutMs'],
    [{ commitTimeoutMs: 2 ** 31 }, 'options.commitTimeoutMs'],
    [{ connectTimeoutMs: 2 ** 31 }, 'options.connectTimeoutMs'],
    [{ storage: 'disk' }, 'options.storage'],
    // Below the server's default ceiling, fractional, or not a number.
    [{ atomicBatchLimit: 999 }, 'options.atomicBatchLimit'],
    [{ atomicBatchLimit: 1500.5 }, 'options.atomicBatchLimit'],
    [{ atomicBatchLimit: '5000' }, 'options.atomicBatchLimit'],
  ])('rejects options %j with an InvalidArgumentError naming %s', async (options, field) => {
    const error = await rejection(createNatsBackend({ servers: NATS_STORE_URL }, options as never));
    expect(error).toMatchObject({ code: 'DUETIME_INVALID_ARGUMENT', field });
  });

  it.each([[null], [42], ['prefix'], [[]]])(
    'rejects options %j that are not an object with an InvalidArgumentError (found by the reliability suite)',
    async (options) => {
      const error = await rejection(createNatsBackend({ servers: NATS_STORE_URL }, options as never));
      expect(error).toMatchObject({ code: 'DUETIME_INVALID_ARGUMENT', field: 'options' });
    },
  );

  it('rejects a target with both or neither of servers and connection, and a closed connection', async () => {
    const nc = await connectNats(NATS_URL);
    await expect(createNatsBackend({ servers: NATS_URL, connection: nc } as never)).rejects.toMatchObject({
      field: 'target',
    });
    await expect(createNatsBackend({} as never)).rejects.toMatchObject({ field: 'target' });
    await nc.close();
    await expect(createNatsBackend({ connection: nc })).rejects.toMatchObject({ field: 'connection' });
    await expect(createNatsBackend({ connection: { not: 'a connection' } } as never)).rejects.toMatchObject({
      field: 'connection',
    });
  });

  it('reports a server that refuses connections as a transient BackendError naming it', async () => {
    const port = await freePort();
    const error = await rejection(createNatsBackend({ servers: `nats://127.0.0.1:${port}` }));
    expect(error).toBeInstanceOf(BackendError);
    expect(error).toMatchObject({ code: 'DUETIME_BACKEND', transient: true });
    expect((error as BackendError).operation).toBe(`connect to nats://127.0.0.1:${port}`);
    expect((error as Error).message).toMatch(/connection refused.*nats-server -js/);
    expect((error as Error).message).not.toContain('scripts/');
  });

  it('gives up on a server that accepts the connection but never speaks, within connectTimeoutMs', async () => {
    const silent: Server = createServer(() => {});
    const port = await new Promise<number>((resolve) =>
      silent.listen(0, '127.0.0.1', () => resolve((silent.address() as { port: number }).port)),
    );
    try {
      const error = await rejection(
        createNatsBackend({ servers: `nats://127.0.0.1:${port}` }, { connectTimeoutMs: 300 }),
      );
      expect(error).toMatchObject({ code: 'DUETIME_BACKEND', transient: true });
      expect((error as Error).message).toContain(`127.0.0.1:${port}`);
    } finally {
      silent.close();
    }
  });

  it('reports an unknown host as a BackendError naming it', async () => {
    const error = await rejection(createNatsBackend({ servers: 'nats://no-such-host.invalid:4222' }));
    expect(error).toMatchObject({ code: 'DUETIME_BACKEND' });
    expect((error as Error).message).toContain('no-such-host.invalid');
  });

  it('uses the application’s connection and never closes it; close() is idempotent', async () => {
    const nc = await connectNats(NATS_STORE_URL);
    const prefix = freshNamespace();
    prefixes.push(prefix);
    const backend = await createNatsBackend({ connection: nc }, { prefix });
    await backend.store.transact((tx) => tx.schedule('k', new Date(), { type: 't', aggregateId: 'a' }));
    expect(backend.server.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(backend.streams).toEqual({ store: `${prefix}_store`, lease: `${prefix}_lease` });
    await backend.close();
    await backend.close();
    expect(nc.isClosed()).toBe(false);
    await nc.flush();
    await expect(backend.store.loadSchedule('k')).rejects.toMatchObject({ code: 'DUETIME_CLOSED' });
    const again = await createNatsBackend({ connection: nc }, { prefix });
    expect((await again.store.loadSchedule('k'))?.key).toBe('k');
    await again.close();
    await nc.close();
  });

  it('refuses a stream of another shape already using its name, naming the setting, and leaves it as it was', async () => {
    const prefix = freshNamespace();
    prefixes.push(prefix);
    const nc = await connectNats(NATS_STORE_URL);
    try {
      const jsm = await jetstreamManager(nc);
      // The store's subjects, but without atomic batches (and a message in it).
      await jsm.streams.add({ name: `${prefix}_store`, subjects: [`${prefix}.s.>`, `${prefix}.q.>`] });
      await jetstream(nc).publish(`${prefix}.s.k`, 'not duetime');
      const error = await rejection(createNatsBackend({ connection: nc }, { prefix }));
      expect(error).toBeInstanceOf(StreamMismatchError);
      expect(error).toMatchObject({ code: 'DUETIME_INVALID_ARGUMENT', stream: `${prefix}_store` });
      expect((error as Error).message).toMatch(/subjects is .*expected/);
      expect((error as Error).message).toMatch(/allow_atomic is false, expected true/);
      const info = await jsm.streams.info(`${prefix}_store`);
      expect(info.config.allow_atomic).not.toBe(true);
      expect(info.state.messages).toBe(1);
      expect(nc.isClosed()).toBe(false);
    } finally {
      await nc.close();
    }
  });

  it('refuses a store stream with other replicas or storage than asked, naming the setting', async () => {
    const prefix = freshNamespace();
    prefixes.push(prefix);
    const first = await createNatsBackend({ servers: NATS_STORE_URL }, { prefix, storage: 'memory' });
    await first.close();
    const error = await rejection(createNatsBackend({ servers: NATS_STORE_URL }, { prefix }));
    expect(error).toBeInstanceOf(StreamMismatchError);
    expect((error as Error).message).toMatch(/storage is "memory", expected "file"/);
  });

  it('refuses a server older than 2.12 for the store, naming its version and the feature, and gives leases and cursors there', async () => {
    const prefix = freshNamespace();
    prefixes.push(prefix);
    const error = await rejection(createNatsBackend({ servers: NATS_URL }, { prefix }));
    expect(error).toBeInstanceOf(NotSupportedError);
    expect((error as Error).message).toMatch(
      /runs 2\.\d+\.\d+; the duetime store needs NATS 2\.12\.0 or later \(atomic batch publish/,
    );
    const coordination = await createNatsCoordination({ servers: NATS_URL }, { prefix });
    try {
      const grant = await coordination.leases.acquire('old/lease', 'me', 5000);
      expect(grant?.token).toBeGreaterThan(0);
      await coordination.cursors.advance('old/cursor', new Date(1000), 60_000);
      expect(await coordination.cursors.read('old/cursor')).toEqual(new Date(1000));
    } finally {
      await coordination.close();
    }
  });

  it('refuses a prefix holding a store of the earlier format, naming the command that moves it', async () => {
    const prefix = freshNamespace();
    prefixes.push(prefix);
    const nc = await connectNats(NATS_STORE_URL);
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({
        name: `${prefix}_state`,
        subjects: [`${prefix}.st.>`],
        max_msgs_per_subject: 2,
      });
      const error = await rejection(createNatsBackend({ connection: nc }, { prefix }));
      expect(error).toBeInstanceOf(LegacyStoreError);
      expect(error).toMatchObject({ code: 'DUETIME_NOT_SUPPORTED', prefix });
      expect((error as Error).message).toContain(
        `duetime migrate --backend 'nats://<host>:<port>?prefix=${prefix}'`,
      );
      // Nothing was created beside it.
      await expect(jsm.streams.info(`${prefix}_store`)).rejects.toThrow(/not found/);
    } finally {
      await nc.close();
    }
  });
});
