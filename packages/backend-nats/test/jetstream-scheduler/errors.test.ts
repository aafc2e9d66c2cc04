import { BackendError, CronSyntaxError, InvalidArgumentError, NotSupportedError } from '@duetime/core';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectNats } from '../../src/connection.js';
import { JetStreamScheduler, parseCron6 } from '../../src/jetstream-scheduler/index.js';
import { connectRequired, Harness, NEW_URL, newServer, OLD_URL, reportNotRun } from './helpers.js';

describe('JetStream scheduler, bad input and unreachable servers', () => {
  let nc: NatsConnection;
  let harness: Harness;

  beforeAll(async () => {
    nc = await connectRequired(OLD_URL);
    harness = new Harness(nc);
  });
  afterEach(async () => {
    await harness.cleanup();
  });
  afterAll(async () => {
    await nc?.close();
  });

  it('rejects bad keys, names, ids, delays, dates and payloads before any I/O, naming the field', async () => {
    const s = harness.scheduler({ mode: 'emulated', pump: false });
    const cases: Array<[() => Promise<unknown>, string, unknown]> = [
      [() => s.after('bad\u0000key', 10), 'key', 'bad\u0000key'],
      [() => s.after('', 10), 'key', ''],
      [() => s.after('k', -1), 'ms', -1],
      [() => s.after('k', Number.NaN), 'ms', Number.NaN],
      [() => s.at('k', new Date('nope')), 'when', undefined],
      [() => s.at('k', '2030-01-01' as unknown as Date), 'when', '2030-01-01'],
      [() => s.atId('k', 'id\nx', new Date(), 1), 'msgId', 'id\nx'],
      [() => s.after('k', 10, { f: () => 1 }), 'payload.f', undefined],
      [() => s.after('k', 10, 'x'.repeat(300_000)), 'payload', undefined],
      [() => s.cron('bad\u0007name', 'k', '* * * * * *'), 'name', 'bad\u0007name'],
      [() => s.cron('n', 'bad\u001fkey', '* * * * * *'), 'key', 'bad\u001fkey'],
      [
        () =>
          s.consumeFired(
            'bad name',
            3,
            () => {},
            () => {},
          ),
        'durable',
        'bad name',
      ],
      [
        () =>
          s.consumeFired(
            'd',
            0,
            () => {},
            () => {},
          ),
        'maxDeliver',
        0,
      ],
      [() => s.reclaimFired('no-such-durable'), 'durable', 'no-such-durable'],
      // Longer than a Node.js timer keeps (its keep-alive interval would run every millisecond).
      [
        () =>
          s.consumeFired(
            'd',
            3,
            () => {},
            () => {},
            { ackWait: 2 ** 31 },
          ),
        'options.ackWait',
        2 ** 31,
      ],
      [
        () =>
          s.consumeFired(
            'd',
            3,
            () => {},
            () => {},
            { maxRetryDelay: 2 ** 31 },
          ),
        'options.maxRetryDelay',
        2 ** 31,
      ],
    ];
    for (const [call, field, value] of cases) {
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
      if (value !== undefined) expect((error as InvalidArgumentError).value).toEqual(value);
    }
  });

  it('rejects bad options in the constructor', () => {
    const bad: Array<[Record<string, unknown>, string]> = [
      [{ prefix: 'a..b' }, 'options.prefix'],
      [{ prefix: 'a b' }, 'options.prefix'],
      [{ prefix: 'a.*' }, 'options.prefix'],
      [{ stream: 'a.b' }, 'options.stream'],
      [{ mode: 'fast' }, 'options.mode'],
      [{ duplicateWindow: 10 }, 'options.duplicateWindow'],
      [{ leaseTtl: 0 }, 'options.leaseTtl'],
      [{ fireAheadMs: -1 }, 'options.fireAheadMs'],
      [{ fireAheadMs: 60_001 }, 'options.fireAheadMs'],
      [{ fireAheadMs: '500' }, 'options.fireAheadMs'],
    ];
    for (const [options, field] of bad)
      expect(() => new JetStreamScheduler(nc, options), field).toThrowError(
        expect.objectContaining({ field }),
      );
    expect(() => new JetStreamScheduler(undefined as unknown as NatsConnection)).toThrowError(
      expect.objectContaining({ field: 'connection' }),
    );
  });

  it('rejects bad cron expressions with the field and the value', async () => {
    const s = harness.scheduler({ mode: 'emulated', pump: false });
    const cases: Array<[string, string]> = [
      ['* * * * *', 'expression'],
      ['0 0 0 * * * *', 'expression'],
      ['@hourly', 'expression'],
      ['61 * * * * *', 'second'],
      ['0 0 25 * * *', 'hour'],
      ['0 0 0 L * *', 'dayOfMonth'],
      ['0 0 0 * * 7', 'dayOfWeek'],
      ['0 0 0 * * 5-7', 'dayOfWeek'],
      ['0 0 0 30 2 *', 'expression'],
    ];
    for (const [expr, field] of cases) {
      const error = await s.cron('n', 'k', expr).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, expr).toBeInstanceOf(CronSyntaxError);
      expect((error as CronSyntaxError).expression, expr).toBe(expr);
      if (field !== 'expression' || (error as CronSyntaxError).field === 'expression')
        expect((error as CronSyntaxError).field, expr).toBe(field);
    }
    expect(parseCron6('0 30 9 * * MON-FRI').next(new Date('2026-01-02T10:00:00Z'))?.toISOString()).toBe(
      '2026-01-05T09:30:00.000Z',
    );
    expect(parseCron6('*/15 * * * * SUN').next(new Date('2026-01-03T23:59:59Z'))?.toISOString()).toBe(
      '2026-01-04T00:00:00.000Z',
    );
  });

  it('refuses native mode on a server without message schedules', async () => {
    const s = harness.scheduler({ mode: 'native' });
    const error = await s.ensureStream().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(NotSupportedError);
    expect((error as NotSupportedError).message).toContain(nc.info?.version as string);
  });

  it('refuses an existing stream with an age limit, naming the stream', async () => {
    const s = harness.scheduler({ mode: 'emulated', pump: false });
    const { jetstreamManager } = await import('@nats-io/jetstream');
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: s.stream, subjects: [`${s.stream}.x`], max_age: 60e9 });
    const error = await s.ensureStream().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({
      code: 'DUETIME_INVALID_ARGUMENT',
      field: 'options.stream',
      value: s.stream,
    });
  });

  it('names the server when it cannot be reached, and the URL when it is malformed', async () => {
    const error = await connectNats('nats://127.0.0.1:1', { connectTimeoutMs: 1_000 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(BackendError);
    expect(error).toMatchObject({ code: 'DUETIME_BACKEND', transient: true });
    expect((error as BackendError).message).toContain('nats://127.0.0.1:1');
    await expect(JetStreamScheduler.connect('http://x y')).rejects.toMatchObject({
      code: 'DUETIME_INVALID_ARGUMENT',
      field: 'servers',
      value: 'http://x y',
    });
  });

  it('fails with a typed error on a closed connection, and after close()', async () => {
    const own = await JetStreamScheduler.connect(OLD_URL, {
      prefix: 'closedcheck',
      mode: 'emulated',
      pump: false,
    });
    const other = new JetStreamScheduler(own.connection, { prefix: 'closedcheck2' });
    await own.close();
    await expect(own.after('k', 1)).rejects.toMatchObject({ code: 'DUETIME_CLOSED' });
    const error = await other.ensureStream().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).message).toMatch(/closed/);
  });
});

const absent = !newServer.available;
if (absent) reportNotRun('JetStream scheduler, mode checks on NATS >= 2.12', newServer.reason);

describe('JetStream scheduler, the stream decides the mode (NATS >= 2.12)', () => {
  // Needed, not optional: fail with why, and how to provide it.

  beforeAll(() => {
    if (absent)
      throw new Error(`${newServer.reason}; start it with 'bash scripts/services.sh up --clusters'`);
  });
  let nc: NatsConnection;
  let harness: Harness;

  beforeAll(async () => {
    nc = await connectRequired(NEW_URL);
    harness = new Harness(nc);
  });
  afterEach(async () => {
    await harness.cleanup();
  });
  afterAll(async () => {
    await nc?.close();
  });

  it('keeps an emulated stream emulated for auto, and refuses native on it', async () => {
    const first = harness.scheduler({ mode: 'emulated', pump: false });
    const { prefix } = await first.ensureStream();
    const auto = harness.scheduler({ prefix, pump: false });
    expect((await auto.ensureStream()).mode).toBe('emulated');
    const native = harness.scheduler({ prefix, mode: 'native', pump: false });
    await expect(native.ensureStream()).rejects.toMatchObject({
      code: 'DUETIME_INVALID_ARGUMENT',
      field: 'options.mode',
      value: 'native',
    });
  });

  it('refuses to force emulated mode on a native stream', async () => {
    const first = harness.scheduler({ pump: false });
    const info = await first.ensureStream();
    expect(info).toMatchObject({ mode: 'native', cronMode: 'native' });
    const emulated = harness.scheduler({ prefix: info.prefix, mode: 'emulated' });
    await expect(emulated.ensureStream()).rejects.toMatchObject({
      code: 'DUETIME_INVALID_ARGUMENT',
      field: 'options.mode',
      value: 'emulated',
    });
  });
});
