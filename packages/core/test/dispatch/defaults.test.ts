import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  consoleLogger,
  createMemoryBackend,
  DEFAULT_MAX_ATTEMPTS,
  Dispatcher,
  defaultLogger,
  exponentialBackoff,
  InvalidArgumentError,
  ManualClock,
  type MessageOf,
  pinoLogger,
} from '../../src/index.js';

afterEach(() => {
  vi.restoreAllMocks();
});

describe('exponentialBackoff', () => {
  it('doubles from the base up to the cap, each delay reduced by at most the jitter share', () => {
    const backoff = exponentialBackoff({ base: 100, max: 1000, jitter: 0.2 });
    for (let round = 0; round < 50; round++) {
      const delays = [1, 2, 3, 4, 5, 6, 40, 5000].map((attempt) => backoff(attempt));
      const nominal = [100, 200, 400, 800, 1000, 1000, 1000, 1000];
      delays.forEach((delay, i) => {
        expect(delay).toBeLessThanOrEqual(nominal[i]!);
        expect(delay).toBeGreaterThanOrEqual(Math.floor(nominal[i]! * 0.8));
      });
    }
    expect(exponentialBackoff({ jitter: 0 })(3)).toBe(4000);
    expect(exponentialBackoff({ jitter: 0 })(100)).toBe(3_600_000);
  });

  it('refuses bad options with typed errors naming them', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ base: 0 }, 'backoff.base'],
      [{ base: -1 }, 'backoff.base'],
      [{ max: Number.NaN }, 'backoff.max'],
      [{ base: 2000, max: 1000 }, 'backoff.max'],
      [{ factor: 0.5 }, 'backoff.factor'],
      [{ factor: '2' }, 'backoff.factor'],
      [{ jitter: 1.5 }, 'backoff.jitter'],
      [{ jitter: Number.NaN }, 'backoff.jitter'],
    ];
    for (const [options, field] of cases) {
      let error: unknown;
      try {
        exponentialBackoff(options as never);
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(options)).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
  });
});

describe('Dispatcher defaults', () => {
  it('logs a failing processor at warn on the console, backs off exponentially, and dead-letters after 20 attempts', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const backend = createMemoryBackend({ clock });
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const error = vi.spyOn(console, 'error').mockImplementation(() => {});
    await backend.store.transact((tx) => tx.schedule('fails', new Date(clock.now() - 1), { type: 'x' }));
    const attempts: number[] = [];
    const dispatcher = new Dispatcher({
      store: backend.store,
      processor: async () => {
        attempts.push(clock.now());
        throw new Error('always');
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    for (let hour = 0; hour < 24 && dispatcher.snapshot().deadLettered === 0; hour++)
      await clock.advance(3_600_000);
    expect(attempts).toHaveLength(DEFAULT_MAX_ATTEMPTS);
    expect(DEFAULT_MAX_ATTEMPTS).toBe(20);
    const gaps = attempts.slice(1).map((t, i) => t - attempts[i]!);
    // 1 s, 2 s, 4 s, … with up to 20% jitter, never more than an hour.
    expect(gaps[0]).toBeGreaterThanOrEqual(800);
    expect(gaps[0]).toBeLessThanOrEqual(1000);
    expect(gaps[5]).toBeGreaterThanOrEqual(0.8 * 32_000);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(3_600_000);
    expect(warn.mock.calls.filter(([line]) => String(line).includes('processor failed'))).toHaveLength(19);
    expect(String(warn.mock.calls[0]![0])).toMatch(/^duetime processor failed; will retry .*"key":"fails"/);
    expect(error.mock.calls.some(([line]) => String(line).includes('message dead-lettered'))).toBe(true);
    ac.abort();
    await done;
  });

  it('retries for ever with maxAttempts: Infinity', async () => {
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const backend = createMemoryBackend({ clock, logger: consoleLogger({ level: 'error' }) });
    await backend.store.transact((tx) => tx.schedule('fails', new Date(clock.now() - 1), { type: 'x' }));
    let calls = 0;
    const dispatcher = new Dispatcher({
      store: backend.store,
      maxAttempts: Number.POSITIVE_INFINITY,
      retryDelay: 1000,
      processor: async () => {
        calls++;
        throw new Error('always');
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(40_000);
    expect(calls).toBeGreaterThan(DEFAULT_MAX_ATTEMPTS);
    expect(dispatcher.snapshot().deadLettered).toBe(0);
    ac.abort();
    await done;
  });

  it('types handlers by the message map and routes each type to its handler', async () => {
    type Messages = {
      'order.expire': { orderId: string };
      'invoice.remind': { invoiceId: string; n: number };
    };
    const clock = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    const backend = createMemoryBackend({ clock });
    const first: MessageOf<Messages> = { type: 'order.expire', data: { orderId: 'ORD-1' } };
    const second: MessageOf<Messages> = { type: 'invoice.remind', data: { invoiceId: 'INV-7', n: 2 } };
    await backend.store.transact(async (tx) => {
      await tx.schedule('o', new Date(clock.now() - 2), first);
      await tx.schedule('i', new Date(clock.now() - 1), second);
    });
    const seen: string[] = [];
    const dispatcher = new Dispatcher<Messages>({
      store: backend.store,
      handlers: {
        'order.expire': async (_tx, message) => void seen.push(message.data!.orderId),
        'invoice.remind': async (_tx, message) =>
          void seen.push(`${message.data!.invoiceId}#${message.data!.n}`),
      },
    });
    const ac = new AbortController();
    const done = dispatcher.run(ac.signal);
    await clock.advance(0);
    expect(seen).toEqual(['ORD-1', 'INV-7#2']);
    ac.abort();
    await done;
  });
});

describe('loggers', () => {
  it('pinoLogger passes fields first and the message second, errors as `err`', () => {
    const calls: [string, object, string | undefined][] = [];
    const record = (level: string) => (fields: object, message?: string) =>
      void calls.push([level, fields, message]);
    const logger = pinoLogger({
      debug: record('debug'),
      info: record('info'),
      warn: record('warn'),
      error: record('error'),
    });
    const boom = new Error('boom');
    logger.warn('processor failed', { key: 'k', error: boom });
    logger.info('plain');
    expect(calls).toEqual([
      ['warn', { key: 'k', err: boom }, 'processor failed'],
      ['info', {}, 'plain'],
    ]);
  });

  it('consoleLogger writes at its level and above; the default logger writes warnings and errors only', () => {
    const info = vi.spyOn(console, 'info').mockImplementation(() => {});
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    const debug = vi.spyOn(console, 'debug').mockImplementation(() => {});
    consoleLogger({ level: 'warn' }).info('hidden');
    consoleLogger({ level: 'warn' }).warn('shown', { a: 1 });
    consoleLogger({ verbose: true }).debug('detail');
    defaultLogger.info('hidden too');
    defaultLogger.warn('careful');
    expect(info).not.toHaveBeenCalled();
    expect(warn.mock.calls.map(([line]) => line)).toEqual(['shown {"a":1}', 'duetime careful']);
    expect(debug.mock.calls.map(([line]) => line)).toEqual(['detail']);
  });
});
