import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BackendError, ClosedError, InvalidArgumentError } from '@duetime/core';
import { afterAll, expect, it } from 'vitest';
import { createFileBackend } from '../src/file-backend.js';

const root = mkdtempSync(join(tmpdir(), 'duetime-file-journal-lock-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

let dirs = 0;
const freshDirectory = () => join(root, `d${dirs++}`);
const message = { type: 'test', aggregateId: 'a' };

/** Puts a lock in `directory` as if the process `pid` held it. */
function plantLock(directory: string, pid: number): string {
  mkdirSync(join(directory, 'lock'), { recursive: true });
  const owner = join(directory, 'lock', `${pid}-0123456789ab`);
  writeFileSync(owner, '');
  return owner;
}

it('breaks a lock whose holder died, and leaves no lock behind', async () => {
  const directory = freshDirectory();
  const backend = await createFileBackend({ directory });
  try {
    const { pid } = spawnSync(process.execPath, ['-e', '']);
    plantLock(directory, pid!);
    await backend.store.transact((tx) => tx.schedule('k', new Date(), message));
    expect((await backend.store.loadSchedule('k'))?.version).toBe(1);
    expect(existsSync(join(directory, 'lock'))).toBe(false);
  } finally {
    await backend.close();
  }
  // Closing removes this instance's private lock directory too.
  expect(readdirSync(directory)).toEqual(['journal.jsonl']);
});

it('removes the private lock directories and temporary files of dead processes when opening', async () => {
  const directory = freshDirectory();
  const { pid: dead } = spawnSync(process.execPath, ['-e', '']);
  const leftovers = [`lock-${dead}-0123456789ab`, `journal-${dead}-0123456789ab.tmp`];
  const live = `lock-${process.pid}-0123456789ab`;
  for (const name of [...leftovers, live]) mkdirSync(join(directory, name), { recursive: true });
  const backend = await createFileBackend({ directory });
  await backend.close();
  expect(readdirSync(directory).sort()).toEqual(['journal.jsonl', live]);
});

it('waits for a live holder, then fails transiently naming it, without breaking its lock', async () => {
  const directory = freshDirectory();
  const backend = await createFileBackend({ directory, lockTimeoutMs: 200 });
  try {
    const owner = plantLock(directory, process.pid);
    const error = await backend.leases.acquire('k', 'me', 1000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).transient).toBe(true);
    expect((error as Error).message).toContain(`held by live process ${process.pid}`);
    expect(existsSync(owner)).toBe(true);
    rmSync(join(directory, 'lock'), { recursive: true });
    expect(await backend.leases.acquire('k', 'me', 1000)).toEqual({ token: 1 });
  } finally {
    await backend.close();
  }
});

it('takes an empty lock directory (a release cut short) as free', async () => {
  const directory = freshDirectory();
  mkdirSync(join(directory, 'lock'), { recursive: true });
  const backend = await createFileBackend({ directory, lockTimeoutMs: 200 });
  try {
    expect(await backend.cursors.advance('c', new Date(5), 1000)).toEqual(new Date(5));
  } finally {
    await backend.close();
  }
});

it('rejects bad options with typed errors naming the field, and an unusable directory naming the path', async () => {
  const cases: [string, unknown][] = [
    ['options', undefined],
    ['options.directory', { directory: '' }],
    ['options.directory', { directory: 42 }],
    ['options.lockTimeoutMs', { directory: freshDirectory(), lockTimeoutMs: -1 }],
    ['options.compactBytes', { directory: freshDirectory(), compactBytes: 0 }],
  ];
  for (const [field, options] of cases) {
    const error = await createFileBackend(options as never).catch((e: unknown) => e);
    expect(error, field).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe(field);
  }
  const file = join(root, 'a-file');
  writeFileSync(file, '');
  const error = await createFileBackend({ directory: join(file, 'data') }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(BackendError);
  expect((error as Error).message).toContain(join(file, 'data'));
});

it('closes once, and refuses calls after closing', async () => {
  const backend = await createFileBackend({ directory: freshDirectory() });
  await backend.close();
  await backend.close();
  await expect(backend.leases.acquire('k', 'me', 1000)).rejects.toBeInstanceOf(ClosedError);
  await expect(backend.cursors.read('c')).rejects.toBeInstanceOf(ClosedError);
  await expect(backend.store.loadSchedule('k')).rejects.toBeInstanceOf(ClosedError);
});
