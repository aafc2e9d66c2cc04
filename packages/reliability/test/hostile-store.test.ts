import { freshNamespace } from '@duetime/conformance';
import {
  aggregate,
  type Backend,
  DuetimeError,
  describeValue,
  InvalidArgumentError,
  MAX_MESSAGE_BYTES,
  type Message,
} from '@duetime/core';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dateLike, hostileText, hostileValue, messageLike, SPECIAL } from '../src/arbitraries.js';
import { SIZES, selectedBackends } from '../src/mode.js';
import { runSeed } from '../src/random.js';
import { recordResult } from '../src/results.js';
import {
  assertServiceUp,
  BACKENDS,
  dropTarget,
  newTarget,
  openTarget,
  type TargetSpec,
} from '../src/targets.js';
import { dropFuzzedData, openFuzzedBackend, urlCases } from './fuzz-urls.js';

/**
 * Hostile input through each backend's store: every transaction either commits and reads back exactly
 * what was written, or throws a typed DuetimeError and leaves nothing behind (a valid schedule written
 * first in the same transaction must be absent afterwards: no partial writes).
 */
const seed = runSeed();
const storeRuns = Math.max(20, Math.round(SIZES.fuzzRuns / 5));
const DAY = 86_400_000;

const notes = aggregate({
  type: 'reliability-notes',
  initial: 0,
  apply: { noted: (n: number) => n + 1 },
});
const NOTE_TYPES = new Set(['noted']);

/** What a message becomes once stored: its JSON round trip (undefined properties dropped). */
function stored(message: Message): Message {
  return JSON.parse(
    JSON.stringify({ type: message.type, aggregateId: message.aggregateId, data: message.data }),
  );
}

async function within<T>(what: string, ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms (a hang)`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function expectTyped(error: unknown): void {
  if (!(error instanceof DuetimeError)) throw new Error(`untyped error: ${String(error)}`, { cause: error });
  expect(error.code).toMatch(/^DUETIME_[A-Z_]+$/);
}

describe.each(selectedBackends(BACKENDS))('hostile input through the %s store', (kind) => {
  let target: TargetSpec;
  let backend: Backend;
  let cases = 0;
  let n = 0;

  beforeAll(async () => {
    await assertServiceUp(kind);
    console.log(
      `[hostile ${kind}] seed ${seed}, ${storeRuns} runs per store property (replay: DUETIME_CHAOS_SEED=${seed})`,
    );
    target = newTarget(kind, freshNamespace());
    backend = await openTarget(target);
  });

  afterAll(async () => {
    console.log(
      `[hostile ${kind}] ${cases} cases, every one committed and read back exactly, or a typed error with nothing written`,
    );
    recordResult('hostile-store', kind, seed, { cases });
    await backend?.close();
    if (target) await dropTarget(target);
    await dropFuzzedData(kind);
  });

  /** Runs `write` after scheduling a sentinel in the same transaction; checks all-or-nothing. */
  /** What a failed transaction must leave as it was: every schedule, and the events of `stream`. */
  async function state(stream?: string): Promise<string> {
    const schedules = await backend.store.pageSchedules({ limit: 10_000 });
    const events = stream === undefined ? [] : await backend.store.loadEvents(stream).catch(() => []);
    return JSON.stringify([schedules.items, events]);
  }

  async function attempt(
    write: Parameters<Backend['store']['transact']>[0],
    stream?: string,
  ): Promise<boolean> {
    cases++;
    const sentinel = `sentinel/${n++}`;
    const sentinelMessage = { type: 'sentinel', aggregateId: sentinel };
    const before = await state(stream);
    try {
      await within(
        'a transaction',
        30_000,
        backend.store.transact(async (tx) => {
          await tx.schedule(sentinel, new Date(Date.now() + DAY), sentinelMessage);
          await write(tx);
        }),
      );
    } catch (error) {
      expectTyped(error);
      expect(await backend.store.loadSchedule(sentinel), 'no partial write').toBeUndefined();
      expect(await state(stream), 'the store is unchanged after a failed transaction').toBe(before);
      return false;
    }
    expect((await backend.store.loadSchedule(sentinel))?.message).toEqual(sentinelMessage);
    await backend.store.transact((tx) => tx.cancelSchedule(sentinel));
    return true;
  }

  it('schedules with hostile keys, deadlines and messages', async () => {
    await fc.assert(
      fc.asyncProperty(hostileText(), dateLike, messageLike, async (key, at, message) => {
        const committed = await attempt((tx) => tx.schedule(key, at as Date, message as Message));
        if (!committed) {
          // Whatever was refused was not written either (when the key itself is a valid one to ask for).
          const probe = await backend.store.loadSchedule(key).catch((error: unknown) => expectTyped(error));
          expect(probe).toBeUndefined();
          return;
        }
        const read = await backend.store.loadSchedule(key);
        expect(read?.key).toBe(key);
        expect(read?.at.getTime()).toBe((at as Date).getTime());
        expect(read?.message).toEqual(stored(message as Message));
        await backend.store.transact((tx) => tx.cancelSchedule(key));
      }),
      { seed, numRuns: storeRuns },
    );
  });

  it('events with hostile aggregate ids, types and data', async () => {
    await fc.assert(
      fc.asyncProperty(
        hostileText(),
        fc.oneof(fc.constantFrom('noted'), hostileText(10)),
        fc.oneof(fc.jsonValue({ maxDepth: 3 }), hostileValue),
        async (id, type, data) => {
          const committed = await attempt(
            (tx) => tx.exec(notes, id, (_count, ag) => ag.raise(type, data === undefined ? undefined : data)),
            id,
          );
          if (!committed) return;
          expect(NOTE_TYPES.has(type)).toBe(true);
          const events = await backend.store.loadEvents(id);
          expect(events.at(-1)?.type).toBe(type);
          expect(events.at(-1)?.data).toEqual(
            data === undefined ? undefined : JSON.parse(JSON.stringify(data)),
          );
        },
      ),
      { seed, numRuns: storeRuns },
    );
  });

  it('prefix cancellation is literal, whatever the metacharacters in keys and prefixes', async () => {
    const piece = fc.string({ unit: fc.constantFrom(...SPECIAL, 'a', 'b', 'é', '😀'), maxLength: 4 });
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(piece, { minLength: 1, maxLength: 8 }),
        piece,
        async (suffixes, cut) => {
          cases++;
          const base = `pfx/${n++}/`;
          const keys = suffixes.map((s) => `${base}${s}`);
          await backend.store.transact(async (tx) => {
            for (const key of keys)
              await tx.schedule(key, new Date(Date.now() + DAY), { type: 't', aggregateId: 'a' });
          });
          const count = await backend.store.transact((tx) => tx.cancelSchedulePrefix(`${base}${cut}`));
          const left = (await backend.store.pageSchedules({ prefix: base, limit: 100 })).items.map(
            (s) => s.key,
          );
          const expected = keys.filter((k) => !k.startsWith(`${base}${cut}`));
          expect(count).toBe(keys.length - expected.length);
          expect([...left].sort()).toEqual([...expected].sort());
          await backend.store.transact((tx) => tx.cancelSchedulePrefix(base));
        },
      ),
      { seed, numRuns: storeRuns },
    );
  });

  it(`messages of exactly MAX_MESSAGE_BYTES (${MAX_MESSAGE_BYTES}) commit and read back; one byte more is refused with nothing written`, async () => {
    for (const filler of ['a', 'é', '€', '😀']) {
      const at = new Date(Date.now() + DAY);
      const exact = messageOfBytes(MAX_MESSAGE_BYTES, filler);
      const over = messageOfBytes(MAX_MESSAGE_BYTES + 1, filler);
      expect(Buffer.byteLength(JSON.stringify(exact))).toBe(MAX_MESSAGE_BYTES);
      expect(Buffer.byteLength(JSON.stringify(over))).toBe(MAX_MESSAGE_BYTES + 1);
      const key = `size/${filler}`;
      expect(await attempt((tx) => tx.schedule(key, at, exact))).toBe(true);
      expect((await backend.store.loadSchedule(key))?.message).toEqual(exact);
      // An event is checked the same way: its type, aggregate id and data together.
      const event = messageOfBytes(MAX_MESSAGE_BYTES, filler, 'noted', key);
      const eventOver = messageOfBytes(MAX_MESSAGE_BYTES + 1, filler, 'noted', key);
      expect(await attempt((tx) => tx.exec(notes, key, (_n, ag) => ag.raise('noted', event.data)))).toBe(
        true,
      );
      expect((await backend.store.loadEvents(key)).at(-1)?.data).toEqual(event.data);
      expect(await attempt((tx) => tx.exec(notes, key, (_n, ag) => ag.raise('noted', eventOver.data)))).toBe(
        false,
      );
      expect(await backend.store.loadEvents(key)).toHaveLength(1);
      await backend.store.transact((tx) => tx.cancelSchedule(key));
      const refused = backend.store.transact((tx) => tx.schedule(`${key}/over`, at, over));
      await expect(refused).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(refused).rejects.toMatchObject({ field: 'message' });
      expect(await attempt((tx) => tx.schedule(`${key}/over`, at, over))).toBe(false);
      expect(await backend.store.loadSchedule(`${key}/over`)).toBeUndefined();
    }
  });

  it('backend URLs and options: opens (and closes), or a typed error, within a deadline', async () => {
    await fc.assert(
      fc.asyncProperty(urlCases(kind, target), async (fuzzed) => {
        cases++;
        await within(`opening ${describeValue(fuzzed)}`, 60_000, openFuzzedBackend(fuzzed));
      }),
      { seed, numRuns: Math.max(10, Math.round(storeRuns / 3)) },
    );
  });
});

/** A message whose JSON is exactly `bytes` long, padded with `filler` (and ASCII to land exactly). */
function messageOfBytes(bytes: number, filler: string, type = 'big', aggregateId = 'size'): Message {
  const base: Message = { type, aggregateId, data: { pad: '' } };
  const empty = Buffer.byteLength(JSON.stringify(base));
  const fillerBytes = Buffer.byteLength(filler);
  const count = Math.floor((bytes - empty) / fillerBytes);
  const rest = bytes - empty - count * fillerBytes;
  return { ...base, data: { pad: filler.repeat(count) + 'x'.repeat(rest) } };
}
