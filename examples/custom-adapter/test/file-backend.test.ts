import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { watchChild } from '@duetime/conformance';
import { BackendError, CorruptDataError, InvalidArgumentError } from '@duetime/core';
import { afterAll, describe, expect, it } from 'vitest';
import { createFileBackend } from '../src/file-backend.js';
import { withLock } from '../src/lock.js';

const root = mkdtempSync(join(tmpdir(), 'duetime-file-backend-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const freshDir = () => join(root, `d${++dirs}`);

const child = fileURLToPath(new URL('./fixtures/child.ts', import.meta.url));
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const start = (...args: string[]) =>
  watchChild(
    spawn(process.execPath, ['--import', tsx, '--conditions=source', child, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
    { label: `child ${args[0]}` },
  );

describe('the lock', () => {
  it('is taken over at once from a holder that was SIGKILLed, and never from a live one', async () => {
    const dir = freshDir();
    await createFileBackend(dir).then((b) => b.close());
    const holder = start('hold', dir);
    await holder.line(/^HELD$/);
    // Alive: a short wait ends in a typed, transient error naming the holder.
    const refused = await withLock(dir, 200, async () => 'taken').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(BackendError);
    expect((refused as BackendError).transient).toBe(true);
    expect((refused as Error).message).toContain(`held by process ${holder.child.pid}`);
    await holder.kill();
    // Dead: its lock is broken and taken, well within a wait that would otherwise fail.
    expect(await withLock(dir, 10_000, async () => 'taken')).toBe('taken');
  }, 60_000);

  it('lets one caller at a time in, across backends of one process', async () => {
    const dir = freshDir();
    let inside = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 20 }, () =>
        withLock(dir, 10_000, async () => {
          most = Math.max(most, ++inside);
          await new Promise((resolve) => setTimeout(resolve, 1));
          inside--;
        }),
      ),
    );
    expect(most).toBe(1);
  });
});

it('keeps every transaction whole when writers are SIGKILLed at random moments', async () => {
  const dir = freshDir();
  for (let round = 0; round < 2; round++)
    await Promise.all(
      ['a', 'b', 'c'].map(async (name) => {
        const writer = start('write', dir, `${name}${round}`);
        await writer.line(/^COMMITTED 4$/);
        await new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * 30)));
        await writer.kill();
      }),
    );
  const backend = await createFileBackend(dir);
  try {
    const groups = new Map<string, number>();
    for (const s of await backend.store.listSchedules()) {
      const group = s.key.slice(0, s.key.indexOf('/'));
      groups.set(group, (groups.get(group) ?? 0) + 1);
    }
    // All ten schedules of a transaction or none, and exactly the transactions whose event committed.
    expect([...groups.values()].every((n) => n === 10)).toBe(true);
    const events = await backend.store.loadEvents('crash');
    expect(events.map((e) => e.sequence)).toEqual(events.map((_, i) => i + 1));
    const committed = events.map(
      (e) => `${(e.data as { name: string }).name}-${(e.data as { n: number }).n}`,
    );
    expect([...groups.keys()].sort()).toEqual([...committed].sort());
    expect(committed.length).toBeGreaterThanOrEqual(30);
    // The dead writers' locks do not block the next writer.
    await backend.store.transact((tx) => tx.schedule('after/crash', new Date(), { type: 'x' }));
    expect(await backend.store.loadSchedule('after/crash')).toBeDefined();
  } finally {
    await backend.close();
  }
}, 90_000);

describe('bad input', () => {
  it('refuses bad options with typed errors naming them', async () => {
    const cases: [unknown, unknown, string][] = [
      ['', undefined, 'directory'],
      [42, undefined, 'directory'],
      [freshDir(), { claimLapseMs: 0 }, 'options.claimLapseMs'],
      [freshDir(), { lockTimeoutMs: 'soon' }, 'options.lockTimeoutMs'],
      [freshDir(), { lockTimeout: 1000 }, 'options.lockTimeout'],
    ];
    for (const [directory, options, field] of cases) {
      const error = await createFileBackend(directory as string, options as never).catch((e: unknown) => e);
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
  });

  it('refuses a data file that is not its own with a CorruptDataError naming it', async () => {
    const dir = freshDir();
    await createFileBackend(dir).then((b) => b.close());
    writeFileSync(join(dir, 'state.json'), '{"rows": []}');
    await expect(createFileBackend(dir)).rejects.toThrow(CorruptDataError);
    writeFileSync(join(dir, 'state.json'), 'not json');
    await expect(createFileBackend(dir)).rejects.toThrow(/state\.json holds invalid JSON/);
  });

  it('fails with a BackendError naming a directory it cannot create', async () => {
    const file = join(freshDir());
    writeFileSync(file, 'a file, not a directory');
    const error = await createFileBackend(join(file, 'inside')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as Error).message).toContain(join(file, 'inside'));
  });
});
