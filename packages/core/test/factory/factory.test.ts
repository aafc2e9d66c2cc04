import { describe, expect, it } from 'vitest';
import {
  BackendError,
  BackendLifecycle,
  backoff,
  ClosedError,
  calendar,
  createMemoryBackend,
  every,
  guardCursors,
  guardLeases,
  InvalidArgumentError,
  isRegistry,
  type Logger,
  ManualClock,
  parseBackendUrl,
  Registry,
  readFactoryOptions,
  redactUrl,
  retry,
} from '../../src/index.js';

function recordingLogger() {
  const warnings: { message: string; fields?: Record<string, unknown> }[] = [];
  const logger: Logger = {
    debug() {},
    info() {},
    warn: (message, fields) => warnings.push({ message, ...(fields ? { fields } : {}) }),
    error() {},
  };
  return { logger, warnings };
}

describe('readFactoryOptions', () => {
  it('moves a renamed option to its …Ms name with one deprecation warning through the logger', () => {
    const { logger, warnings } = recordingLogger();
    const given = { connectTimeout: 1234, logger };
    const { options } = readFactoryOptions<{ connectTimeoutMs?: number; logger?: Logger }>(given, {
      factory: 'createThing',
      renamed: { connectTimeout: 'connectTimeoutMs' },
    });
    expect(options.connectTimeoutMs).toBe(1234);
    expect('connectTimeout' in options).toBe(false);
    expect(given).toEqual({ connectTimeout: 1234, logger }); // the caller's object is left alone
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.message).toContain('options.connectTimeout is deprecated');
    expect(warnings[0]?.message).toContain('options.connectTimeoutMs');
    expect(warnings[0]?.fields).toEqual({ option: 'connectTimeout', replacement: 'connectTimeoutMs' });
  });

  it('warns about nothing when only current names are used', () => {
    const { logger, warnings } = recordingLogger();
    readFactoryOptions({ connectTimeoutMs: 5, logger } as { connectTimeoutMs: number; logger: Logger }, {
      factory: 'f',
      renamed: { connectTimeout: 'connectTimeoutMs' },
    });
    expect(warnings).toEqual([]);
  });

  it('refuses both names, a non-object, a bad clock and a bad logger, naming the field', () => {
    expect(() =>
      readFactoryOptions({ connectTimeout: 1, connectTimeoutMs: 2 } as object, {
        factory: 'f',
        renamed: { connectTimeout: 'connectTimeoutMs' },
      }),
    ).toThrow(/invalid options.connectTimeout 1: is the old name of options.connectTimeoutMs/);
    expect(() => readFactoryOptions(42 as never, { factory: 'f' })).toThrow(InvalidArgumentError);
    expect(() => readFactoryOptions([] as never, { factory: 'f' })).toThrow(/options/);
    expect(() => readFactoryOptions({ clock: {} } as never, { factory: 'f' })).toThrow(/options.clock/);
    expect(() => readFactoryOptions({ logger: { warn() {} } } as never, { factory: 'f' })).toThrow(
      /options.logger.*no debug/,
    );
  });
});

describe('redactUrl and parseBackendUrl', () => {
  it('hides every password, in the user part and in secret-looking parameters', () => {
    expect(redactUrl('postgres://app:s3cret@db:5432/app')).toBe('postgres://app:***@db:5432/app');
    expect(redactUrl('redis://:pw@h:6379/0')).toBe('redis://:***@h:6379/0');
    expect(redactUrl('nats://a:x@h1:4222,b:y@h2:4222')).toBe('nats://a:***@h1:4222,b:***@h2:4222');
    expect(redactUrl('postgres://h/db?sslmode=require&password=hunter2')).toBe(
      'postgres://h/db?sslmode=require&password=***',
    );
    expect(redactUrl('sqlite:./data/app.db')).toBe('sqlite:./data/app.db');
    expect(redactUrl('not a url: user:pw@host')).toBe('not a url: user:***@host');
  });

  it('checks the scheme, the host and the parameters with typed errors that never show the password', () => {
    const spec = { field: 'url', schemes: ['redis:'], example: 'redis://host:6379', params: ['prefix'] };
    const ok = parseBackendUrl('redis://u:pw@h:6379/0?prefix=billing', spec);
    expect(ok.params.get('prefix')).toBe('billing');
    expect(ok.display).toBe('redis://u:***@h:6379/0?prefix=billing');
    const bad = (url: unknown) => {
      try {
        parseBackendUrl(url, spec);
      } catch (error) {
        return error as InvalidArgumentError;
      }
      throw new Error('accepted');
    };
    expect(bad('http://h').message).toContain('has the scheme http:; expected redis:');
    expect(bad('redis://u:pw@h?schema=x').message).toContain(
      'has the unknown parameter "schema"; known parameters: prefix',
    );
    expect(bad('redis://u:pw@h?schema=x').message).not.toContain('pw');
    expect(bad('redis://h?prefix=a&prefix=b').message).toContain('twice');
    expect(bad('redis://').message).toContain('names no host');
    expect(bad('::').message).toContain('is not a URL');
    expect(bad(undefined).field).toBe('url');
    expect(parseBackendUrl('redis://h?anything=1', { ...spec, params: 'any' }).params.get('anything')).toBe(
      '1',
    );
  });
});

describe('retry', () => {
  it('waits on the injected clock between attempts, with backoff, and stops at the attempt limit', async () => {
    const clock = new ManualClock(0);
    const seen: number[] = [];
    const failing = retry(
      async (attempt) => {
        seen.push(clock.now());
        throw new BackendError('op', `attempt ${attempt}`, { transient: true });
      },
      { clock, attempts: 3, retryIf: () => true, delayMs: backoff({ initialMs: 100, factor: 4 }) },
    );
    const outcome = failing.catch((error: Error) => error.message);
    await clock.advance(10_000);
    expect(await outcome).toBe('op: attempt 3');
    expect(seen).toEqual([0, 100, 500]);
  });

  it('gives up at the deadline with what onGiveUp returns, and rethrows errors it should not retry', async () => {
    const clock = new ManualClock(0);
    const timedOut = retry(
      () => {
        throw new Error('busy');
      },
      {
        clock,
        deadlineMs: 50,
        retryIf: () => true,
        delayMs: () => 20,
        onGiveUp: (_e, elapsed, attempts) => new Error(`gave up after ${elapsed} ms, ${attempts} attempts`),
      },
    ).catch((error: Error) => error.message);
    await clock.advance(1000);
    expect(await timedOut).toBe('gave up after 60 ms, 4 attempts');
    let calls = 0;
    await expect(
      retry(
        () => {
          calls++;
          throw new InvalidArgumentError('x', 1, 'no');
        },
        { clock, attempts: 5, retryIf: (e) => e instanceof BackendError, delayMs: () => 1 },
      ),
    ).rejects.toThrow(InvalidArgumentError);
    expect(calls).toBe(1);
  });

  it('stops waiting with a ClosedError when its signal aborts', async () => {
    const clock = new ManualClock(0);
    const controller = new AbortController();
    const pending = retry(
      () => {
        throw new Error('down');
      },
      {
        clock,
        attempts: 10,
        retryIf: () => true,
        delayMs: () => 1000,
        signal: controller.signal,
        what: 'pool',
      },
    );
    const settled = pending.catch((error: unknown) => error);
    await clock.advance(0);
    controller.abort();
    expect(await settled).toBeInstanceOf(ClosedError);
  });
});

describe('BackendLifecycle, guardLeases and guardCursors', () => {
  it('validates arguments before the adapter sees them, and refuses calls once closed', async () => {
    const backend = createMemoryBackend();
    const calls: string[] = [];
    const life = new BackendLifecycle('test backend');
    const leases = guardLeases(
      {
        acquire: (...args) => {
          calls.push('acquire');
          return backend.leases.acquire(...args);
        },
        renew: (...args) => backend.leases.renew(...args),
        release: (...args) => backend.leases.release(...args),
        holder: (key) => backend.leases.holder(key),
      },
      life,
    );
    const cursors = guardCursors(backend.cursors, life);
    await expect(leases.acquire('', 'me', 1000)).rejects.toMatchObject({ field: 'key' });
    await expect(leases.acquire('k', 'me\u0000', 1000)).rejects.toMatchObject({ field: 'owner' });
    await expect(leases.acquire('k', 'me', 0)).rejects.toMatchObject({ field: 'ttlMs' });
    await expect(leases.acquire('k', 'me', Number.NaN)).rejects.toMatchObject({ field: 'ttlMs' });
    expect(calls).toEqual([]);
    const grant = await leases.acquire('k', 'me', 1000);
    expect(grant?.token).toBeGreaterThan(0);
    await expect(leases.renew('k', 'me', 0, 1000)).rejects.toMatchObject({ field: 'token' });
    await expect(leases.release('k', 'me', 1.5)).rejects.toMatchObject({ field: 'token' });
    await expect(cursors.advance('c', new Date(Number.NaN), 1000)).rejects.toMatchObject({ field: 'at' });
    await expect(cursors.advance('c', new Date(5), -1)).rejects.toMatchObject({ field: 'ttlMs' });
    expect(await cursors.advance('c', new Date(5), 1000)).toEqual(new Date(5));
    // A cursor's time to live is not a timer: months are fine (a calendar keeps cursors that long).
    expect(await cursors.advance('c', new Date(6), 90 * 86_400_000)).toEqual(new Date(6));

    let cleanUps = 0;
    const closing = [life.close(() => void cleanUps++), life.close(() => void cleanUps++)];
    expect(closing[0]).toBe(closing[1]);
    await Promise.all(closing);
    expect(cleanUps).toBe(1);
    expect(life.closed).toBe(true);
    await expect(leases.holder('k')).rejects.toBeInstanceOf(ClosedError);
    await expect(cursors.read('c')).rejects.toThrow('test backend is closed');
    await backend.close();
  });
});

describe('isRegistry', () => {
  it('recognises registries by a shared brand, not by class identity', () => {
    const registry = new Registry(every('tick', 1000, () => {}));
    expect(isRegistry(registry)).toBe(true);
    // What another copy of @duetime/core makes: a different class carrying the same Symbol.for brand.
    const foreign = Object.create(null) as Record<symbol, unknown>;
    foreign[Symbol.for('duetime.registry')] = true;
    expect(isRegistry(foreign)).toBe(true);
    expect(isRegistry({ size: 1 })).toBe(false);
    expect(isRegistry(null)).toBe(false);
  });

  it('describes only the options a declaration sets', () => {
    const [plain, guarded] = new Registry(
      calendar('UTC').daily('plain', () => {}),
      every('guarded', 1000, () => {}).with({ withoutOverlap: true, timeout: 500 }),
    ).describe();
    expect(plain?.options).toEqual({});
    expect(guarded?.options).toMatchObject({ withoutOverlap: true, timeout: 500 });
  });
});
