import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openBackend } from '@duetime/cli';
import {
  calendar,
  createMemoryBackend,
  cron,
  Dispatcher,
  DuetimeError,
  every,
  InvalidArgumentError,
  identifier,
  LeaseManager,
  parseCron,
  Registry,
  Scheduler,
  scheduleKey,
  schedulePrefix,
} from '@duetime/core';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import {
  cronLike,
  dateLike,
  durationLike,
  hostileText,
  hostileValue,
  optionsLike,
  zoneLike,
} from '../src/arbitraries.js';
import { SIZES } from '../src/mode.js';
import { runSeed } from '../src/random.js';
import { recordResult } from '../src/results.js';

/**
 * Hostile input to the parts that need no server: every outcome is a value or a typed DuetimeError
 * (never another exception, a crash or a hang). The store, URLs and payload sizes are fuzzed against
 * every backend in hostile-store.test.ts.
 */
const seed = runSeed();
const runs = SIZES.fuzzRuns;
let cases = 0;
console.log(`[hostile input] seed ${seed}, ${runs} runs per property (replay: DUETIME_CHAOS_SEED=${seed})`);

/** Runs `fn`: fine when it returns, fine when it throws a DuetimeError; anything else fails the property. */
function typed<T>(fn: () => T): { value?: T; error?: DuetimeError } {
  cases++;
  try {
    return { value: fn() };
  } catch (error) {
    if (!(error instanceof DuetimeError))
      throw new Error(`untyped error: ${String(error)}`, { cause: error });
    expect(error.code).toMatch(/^DUETIME_[A-Z_]+$/);
    if (error instanceof InvalidArgumentError) expect(typeof error.field).toBe('string');
    return { error };
  }
}

const check = (property: fc.IProperty<never> | fc.IProperty<unknown[]>) =>
  fc.assert(property as fc.IProperty<unknown[]>, { seed, numRuns: runs });

const SCHEDULE_OPTIONS = [
  'timeout',
  'withoutOverlap',
  'overlapTTL',
  'environments',
  'catchUp',
  'days',
  'between',
  'unlessBetween',
  'lastDayOfMonth',
  'when',
  'evenInMaintenanceMode',
  'before',
  'after',
  'failed',
  'dst',
] as const;
const SCHEDULER_CONFIG = [
  'group',
  'namespace',
  'environment',
  'clock',
  'concurrency',
  'maxHistory',
  'maxPerTick',
  'pollInterval',
  'leadershipTTL',
  'grace',
  'capacityWait',
  'drainTimeout',
  'cursorTTL',
  'owner',
  'logger',
  'wake',
  'maintenance',
  'onRecord',
  'cursors',
] as const;
const DISPATCHER_OPTIONS = [
  'rescanInterval',
  'retryDelay',
  'concurrency',
  'maxAttempts',
  'onDeadLetter',
  'drainTimeout',
  'batchSize',
  'logger',
  'clock',
] as const;

describe('hostile input without a server', () => {
  afterAll(() => {
    console.log(`[hostile input] ${cases} cases, every one a value or a typed DuetimeError`);
    recordResult('hostile-input', 'core', seed, { cases });
  });

  it('the cron parser: a spec whose next/prev move the right way, or a typed error', () => {
    const instant = fc.date({
      min: new Date('1971-01-01'),
      max: new Date('2200-01-01'),
      noInvalidDate: true,
    });
    check(
      fc.property(
        cronLike,
        zoneLike,
        fc.option(hostileValue),
        instant,
        dateLike,
        (expression, zone, dst, at, odd) => {
          const parsed = typed(() =>
            parseCron(expression, zone as string, dst === null ? {} : { dst: dst as never }),
          );
          if (!parsed.value) return;
          const spec = parsed.value;
          const next = typed(() => spec.next(at)).value;
          if (next !== undefined) expect(next.getTime()).toBeGreaterThan(at.getTime());
          const prev = typed(() => spec.prev(at)).value;
          if (prev !== undefined) expect(prev.getTime()).toBeLessThan(at.getTime());
          typed(() => spec.next(odd as Date));
          typed(() => spec.prev(odd as Date));
        },
      ),
    );
  });

  it('keys, prefixes and identifiers: returned unchanged, or a typed error naming the field', () => {
    check(
      fc.property(fc.oneof(hostileText(), hostileValue), (value) => {
        for (const validate of [scheduleKey, schedulePrefix, (v: string) => identifier('id', v)]) {
          const result = typed(() => validate(value as string));
          if (result.error) expect(result.error).toBeInstanceOf(InvalidArgumentError);
          else expect(result.value).toBe(value);
        }
      }),
    );
  });

  it('declarations: every, cron, calendar builders and with(): a frozen declaration, or a typed error', () => {
    const handler = () => {};
    const options = optionsLike(SCHEDULE_OPTIONS);
    check(
      fc.property(
        fc.oneof(hostileText(), hostileValue),
        durationLike,
        cronLike,
        zoneLike,
        options,
        options,
        fc.oneof(hostileText(10), fc.constantFrom('09:00', '23:59:59', '24:00', '7:5', '12:60')),
        (id, ms, expression, zone, given, more, time) => {
          const made = [
            typed(() => every(id as string, ms as number, handler, given as never)),
            typed(() => cron(id as string, expression, zone as string, handler, given as never)),
            typed(() => calendar(zone as string).dailyAt(id as string, time, handler)),
            typed(() => calendar(zone as string).lastDayOfMonthAt(id as string, time, handler)),
          ];
          for (const { value } of made) {
            if (!value) continue;
            expect(Object.isFrozen(value)).toBe(true);
            typed(() => value.with(more as never));
            typed(() => JSON.stringify(value.describe()));
          }
        },
      ),
    );
  });

  it('Registry, Scheduler and LeaseManager configuration: constructed, or a typed error', () => {
    const backend = createMemoryBackend();
    check(
      fc.property(
        optionsLike(SCHEDULER_CONFIG, fc.oneof(durationLike, hostileText(), hostileValue)),
        fc.array(fc.constantFrom('a', 'b', 'a'), { maxLength: 3 }),
        optionsLike(['key', 'ttl', 'owner', 'renewInterval', 'margin', 'clock', 'onLost'] as const),
        (config, ids, leaseOptions) => {
          const registry = typed(() => new Registry(...ids.map((id) => every(id, 60_000, () => {})))).value;
          const extra = typeof config === 'object' && config !== null ? config : {};
          if (registry) typed(() => new Scheduler({ ...extra, registry, leases: backend.leases }));
          typed(() => new Scheduler(config as never));
          const base = { leases: backend.leases, key: 'k', ttl: 3000 };
          typed(() => new LeaseManager({ ...base, ...(leaseOptions as object) }));
        },
      ),
    );
  });

  it("the CLI's backend URLs (openBackend): opened and closed, or a typed error, never a crash or a hang", async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'duetime-cli-fuzz-'));
    // Only relative SQLite paths (inside a scratch directory); servers on loopback ports nobody listens on
    // or databases that do not exist, so that nothing is created on the shared servers.
    const relative = hostileText(16).filter((s) => !s.startsWith('/') && !s.split('/').includes('..'));
    const url = fc.oneof(
      relative.map((name) => `sqlite:${name}`),
      fc.constantFrom(
        'sqlite:',
        'sqlite::memory:',
        'sqlite://',
        'SQLITE:x.db',
        'sqlite:?mode=ro',
        'sqlite:%zz',
      ),
      fc
        .tuple(
          fc.constantFrom(
            'postgres',
            'postgresql',
            'redis',
            'rediss',
            'nats',
            'tls',
            'mysql',
            'http',
            'file',
            '',
          ),
          fc.constantFrom('://', ':', ':///', '//'),
          fc.constantFrom(
            '127.0.0.1:1',
            'localhost:1',
            '[::1]:1',
            '127.0.0.1:1,127.0.0.1:2',
            'u:p@127.0.0.1:1',
            '',
          ),
          fc.oneof(fc.constantFrom('', '/nosuchdb_fuzz', '/0', '?x=1'), hostileText(6)),
        )
        .map(([scheme, sep, host, rest]) => `${scheme}${sep}${host}${rest}`),
      hostileText(30),
      hostileValue,
    );
    await fc.assert(
      fc.asyncProperty(url, async (given) => {
        cases++;
        try {
          const backend = await openBackend(given as string, { cwd });
          await backend.close();
        } catch (error) {
          if (!(error instanceof DuetimeError))
            throw new Error(`untyped error: ${String(error)}`, { cause: error });
        }
      }),
      { seed, numRuns: Math.max(20, Math.round(runs / 5)) },
    );
    rmSync(cwd, { recursive: true, force: true });
  });

  it('Dispatcher options: constructed, or a typed error', () => {
    const backend = createMemoryBackend();
    check(
      fc.property(optionsLike(DISPATCHER_OPTIONS, durationLike), hostileValue, (options, processor) => {
        const extra = typeof options === 'object' && options !== null ? options : {};
        typed(() => new Dispatcher({ store: backend.store, processor: () => {}, ...extra }));
        typed(() => new Dispatcher({ store: backend.store, processor: processor as never }));
        typed(() => new Dispatcher(options as never));
      }),
    );
  });
});
