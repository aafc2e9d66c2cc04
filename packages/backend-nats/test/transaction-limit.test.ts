import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freshNamespace, waitFor } from '@duetime/conformance';
import {
  type Backend,
  Dispatcher,
  InvalidArgumentError,
  intervalFrom,
  type Logger,
  type Message,
  recurring,
} from '@duetime/core';
import { freePort, newerNatsServerBinary } from '@duetime/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  connectNats,
  createNatsBackend,
  type NatsBackendOptions,
  TransactionTooLargeError,
} from '../src/index.js';
import { type BatchMessage, MAX_ATOMIC_BATCH, NatsIo } from '../src/io.js';
import { layout } from '../src/layout.js';
import { deleteOpened, NATS_STORE_URL, openOn } from './adapter.js';

const HOUR = 3_600_000;
const msg = (id: string): Message => ({ type: 'test', aggregateId: id });
/** The start of an hour well ahead: schedules due in it share one hour marker. */
const hourAhead = () => Math.ceil(Date.now() / HOUR) * HOUR + 2 * HOUR;

const batchOf = (subject: string, count: number): BatchMessage[] =>
  Array.from({ length: count }, (_, i) => ({ subject: `${subject}.${i}`, data: String(i) }));

describe('the atomic batch limit of the NATS server', () => {
  let nc: NatsConnection | undefined;
  afterAll(async () => {
    await nc?.close();
  });

  it('takes 1,000 messages in one atomic batch by default, and refuses 1,001 storing nothing', async () => {
    nc = await connectNats(NATS_STORE_URL);
    const io = await NatsIo.open(nc, 10_000);
    const stream = `B${freshNamespace()}`;
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], allow_atomic: true });
    try {
      expect(MAX_ATOMIC_BATCH).toBe(1000);
      expect(await io.atomicPublish(batchOf(`${stream}.ok`, 1000))).toMatchObject({
        kind: 'stored',
        count: 1000,
      });
      await expect(io.atomicPublish(batchOf(`${stream}.over`, 1001))).rejects.toThrow(
        /atomic publish batch is too large: 1000/,
      );
      expect((await io.subjects(stream, `${stream}.over.>`)).size).toBe(0);
      expect(await io.lastSeq(stream)).toBe(1000);
    } finally {
      await jsm.streams.delete(stream);
    }
  });

  it('takes more when the server is configured so (jetstream.limits.batch.max_msgs, read at start)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'duetime-nats-batch-'));
    const port = await freePort();
    writeFileSync(
      join(dir, 'server.conf'),
      `listen: "127.0.0.1:${port}"\njetstream {\n  store_dir: "${join(dir, 'store')}"\n  limits { batch { max_msgs: 12000 } }\n}\n`,
    );
    const child = spawn(newerNatsServerBinary(), ['-c', join(dir, 'server.conf')], { stdio: 'ignore' });
    let own: NatsConnection | undefined;
    try {
      own = await waitFor(
        'the configured server',
        () => connect({ servers: `nats://127.0.0.1:${port}`, reconnect: false }).catch(() => undefined),
        { timeoutMs: 20_000, intervalMs: 100 },
      );
      const io = await NatsIo.open(own, 20_000);
      await (await jetstreamManager(own)).streams.add({
        name: 'BIG',
        subjects: ['big.>'],
        allow_atomic: true,
      });
      expect(await io.atomicPublish(batchOf('big', 5000))).toMatchObject({ kind: 'stored', count: 5000 });

      // A store told of the server's ceiling commits a transaction of 5,000 schedules (10,000 messages:
      // records and timers) whole; one that keeps to the default refuses it before writing anything.
      const url = `nats://127.0.0.1:${port}`;
      const at = new Date(hourAhead());
      const big = await createNatsBackend({ servers: url }, { prefix: 'wide', atomicBatchLimit: 12_000 });
      const small = await createNatsBackend({ servers: url }, { prefix: 'narrow' });
      try {
        await big.store.transact(async (tx) => {
          for (let i = 0; i < 5000; i++) await tx.schedule(`huge/${i}`, at, msg('h'));
        });
        expect(await big.store.countSchedules()).toBe(5000);
        expect((await big.store.loadSchedule('huge/4999'))?.at).toEqual(at);
        const error = await small.store
          .transact(async (tx) => {
            for (let i = 0; i < 5000; i++) await tx.schedule(`huge/${i}`, at, msg('h'));
          })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect(error).toBeInstanceOf(TransactionTooLargeError);
        expect(error).toMatchObject({ schedules: 5000, limit: 1000 });
        expect(await small.store.countSchedules()).toBe(0);
      } finally {
        await big.close();
        await small.close();
      }
    } finally {
      await own?.close();
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('a transaction larger than one atomic batch', () => {
  afterEach(async () => {
    await deleteOpened();
  });

  async function open(
    options: NatsBackendOptions = {},
  ): Promise<{ backend: Backend; written: () => Promise<number> }> {
    const namespace = freshNamespace();
    const backend = await openOn(NATS_STORE_URL, namespace, { requestTimeoutMs: 20_000, ...options });
    const reader = await connectNats(NATS_STORE_URL);
    const io = await NatsIo.open(reader, 5000);
    const stream = layout(namespace).storeStream;
    const closeBackend = backend.close.bind(backend);
    backend.close = async () => {
      await reader.close();
      await closeBackend();
    };
    return { backend, written: () => io.lastSeq(stream) };
  }

  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      (error: unknown) => error,
    );

  it('is refused before anything is written, with a typed error naming the count and the limit', async () => {
    const { backend, written } = await open();
    try {
      const { store } = backend;
      const at = new Date(hourAhead());
      await store.transact(async (tx) => {
        for (let i = 0; i < 3; i++) await tx.schedule(`kept/${i}`, at, msg('k'));
      });
      const countBefore = await store.countSchedules();
      const seqBefore = await written();
      const error = await refusal(
        store.transact(async (tx) => {
          for (let i = 0; i < 5000; i++) await tx.schedule(`huge/${i}`, at, msg('h'));
        }),
      );
      expect(error).toBeInstanceOf(TransactionTooLargeError);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({
        code: 'DUETIME_INVALID_ARGUMENT',
        field: 'transaction',
        schedules: 5000,
        // Its records, their timers and the commit marker.
        messages: 10_001,
        limit: 1000,
      });
      expect((error as Error).message).toContain('5000 schedules in 10001 messages');
      expect((error as Error).message).toContain('at most 1000 messages');
      expect(await store.countSchedules()).toBe(countBefore);
      expect(countBefore).toBe(3);
      expect(await written()).toBe(seqBefore);
    } finally {
      await backend.close();
    }
  }, 60_000);

  it('set above the server ceiling, a larger transaction is refused by the server whole, and the ceiling kept to', async () => {
    const { backend, written } = await open({ atomicBatchLimit: 6000 });
    try {
      const { store } = backend;
      const at = new Date(hourAhead());
      const seqBefore = await written();
      const attempt = () =>
        refusal(
          store.transact(async (tx) => {
            for (let i = 0; i < 750; i++) await tx.schedule(`over/${i}`, at, msg('o'));
          }),
        );
      // Sent, and refused by the server (its default ceiling is 1,000): nothing stored.
      const first = await attempt();
      expect(first).toBeInstanceOf(TransactionTooLargeError);
      expect(first).toMatchObject({ schedules: 750, messages: 1501, limit: 1000 });
      expect(await written()).toBe(seqBefore);
      // Refused again, now before anything is sent; what fits still commits.
      expect(await attempt()).toMatchObject({ schedules: 750, limit: 1000 });
      await store.transact(async (tx) => {
        for (let i = 0; i < 499; i++) await tx.schedule(`fits/${i}`, at, msg('f'));
      });
      expect(await store.countSchedules()).toBe(499);
    } finally {
      await backend.close();
    }
  }, 60_000);

  it('commits at the limit: 499 schedules are 999 messages (a record and a timer each, and the commit marker); 500 are refused', async () => {
    const { backend, written } = await open();
    try {
      const { store } = backend;
      const base = hourAhead() + 1234;
      const seqBefore = await written();
      // Due times do not matter (each schedule has a timer of its own): spread over seconds.
      await store.transact(async (tx) => {
        for (let i = 0; i < 499; i++) await tx.schedule(`full/${i}`, new Date(base + i * 1000), msg('f'));
      });
      expect(await store.countSchedules()).toBe(499);
      expect((await written()) - seqBefore).toBe(999);
      const error = await refusal(
        store.transact(async (tx) => {
          for (let i = 0; i < 500; i++) await tx.schedule(`over/${i}`, new Date(base), msg('o'));
        }),
      );
      expect(error).toMatchObject({ schedules: 500, messages: 1001, limit: 1000 });
      expect(await store.countSchedules()).toBe(499);
    } finally {
      await backend.close();
    }
  }, 60_000);

  it('holds for recurring schedules too (the same commit): 5,000 refused with nothing written, 499 commit', async () => {
    const { backend, written } = await open();
    try {
      const { store } = backend;
      const first = new Date(hourAhead());
      const hourly = () => recurring(intervalFrom(HOUR, first), { startAt: first });
      const seqBefore = await written();
      const error = await refusal(
        store.transact(async (tx) => {
          for (let i = 0; i < 5000; i++) await tx.schedule(`cron/${i}`, hourly(), msg('c'));
        }),
      );
      expect(error).toBeInstanceOf(TransactionTooLargeError);
      expect(error).toMatchObject({ schedules: 5000, messages: 10_001, limit: 1000 });
      expect(await store.countSchedules()).toBe(0);
      expect(await written()).toBe(seqBefore);
      await store.transact(async (tx) => {
        for (let i = 0; i < 499; i++) await tx.schedule(`cron/${i}`, hourly(), msg('c'));
      });
      expect(await store.countSchedules()).toBe(499);
      expect((await store.loadSchedule('cron/0'))?.at).toEqual(first);
    } finally {
      await backend.close();
    }
  }, 60_000);

  it('holds for a delivery whose processor writes too much: its settlement is refused, the schedule stays pending', async () => {
    const { backend } = await open();
    const warnings: unknown[] = [];
    const logger: Logger = {
      debug() {},
      info() {},
      warn: (_m, fields) => warnings.push(fields?.error),
      error: (_m, fields) => warnings.push(fields?.error),
    };
    const controller = new AbortController();
    let running: Promise<void> | undefined;
    try {
      const { store } = backend;
      await store.transact((tx) => tx.schedule('fan-out', new Date(), msg('f')));
      const at = new Date(hourAhead());
      let attempts = 0;
      const dispatcher = new Dispatcher({
        store,
        logger,
        rescanInterval: 200,
        processor: async (tx) => {
          attempts++;
          for (let i = 0; i < 1200; i++) await tx.schedule(`fanned/${i}`, at, msg('x'));
        },
      });
      running = dispatcher.run(controller.signal);
      await waitFor(
        'the refused settlement',
        () => warnings.some((e) => e instanceof TransactionTooLargeError),
        {
          timeoutMs: 30_000,
        },
      );
      controller.abort();
      await running;
      expect(attempts).toBeGreaterThan(0);
      // The 1,200 it schedules, and the consumption of the delivered one (its record's tombstone).
      expect(warnings.find((e) => e instanceof TransactionTooLargeError)).toMatchObject({
        schedules: 1201,
        limit: 1000,
      });
      expect((await store.loadSchedule('fan-out'))?.key).toBe('fan-out');
      expect(await store.countSchedules()).toBe(1);
    } finally {
      controller.abort();
      await running;
      await backend.close();
    }
  }, 60_000);
});
