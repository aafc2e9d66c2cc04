import { appendFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '@duetime/conformance';
import { type Backend, CorruptDataError, type StoreChange } from '@duetime/core';
import { afterAll, afterEach, expect, it } from 'vitest';
import { createFileBackend, type FileBackendOptions } from '../src/file-backend.js';

const root = mkdtempSync(join(tmpdir(), 'duetime-file-journal-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const opened: Backend[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((b) => b.close()));
});

let dirs = 0;
const freshDirectory = () => join(root, `d${dirs++}`);
async function open(directory: string, options: Partial<FileBackendOptions> = {}): Promise<Backend> {
  const backend = await createFileBackend({ directory, ...options });
  opened.push(backend);
  return backend;
}

const later = new Date(Date.now() + 3_600_000);
const message = (id: string) => ({ type: 'test', aggregateId: id });
const put = (backend: Backend, key: string) =>
  backend.store.transact((tx) => tx.schedule(key, later, message(key)));
const keys = async (backend: Backend) => (await backend.store.listSchedules()).map((s) => s.key);

it('ignores a line torn by a crash, and the next writer cuts it off before appending', async () => {
  const directory = freshDirectory();
  const first = await open(directory);
  await put(first, 'k1');
  const journal = join(directory, 'journal.jsonl');
  const whole = statSync(journal).size;
  appendFileSync(journal, '0123456789abcdef {"r":{"type":"commit","ops":[{"op":"delete","ke');
  const second = await open(directory);
  expect(await keys(second)).toEqual(['k1']);
  await put(second, 'k2');
  expect(await keys(first)).toEqual(['k1', 'k2']);
  const lines = readFileSync(journal, 'utf8').split('\n');
  expect(lines.at(-1)).toBe('');
  expect(lines.slice(0, -1).every((line) => /^[0-9a-f]{16} \{"r":\{"type":"commit"/.test(line))).toBe(true);
  expect(statSync(journal).size).toBeGreaterThan(whole);
});

it('refuses a journal with a complete line that fails its checksum, naming the file', async () => {
  const directory = freshDirectory();
  await put(await open(directory), 'k1');
  const journal = join(directory, 'journal.jsonl');
  writeFileSync(journal, readFileSync(journal, 'utf8').replace('"k1"', '"k2"'));
  const error = await createFileBackend({ directory }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(CorruptDataError);
  expect((error as CorruptDataError).code).toBe('DUETIME_CORRUPT_DATA');
  expect((error as Error).message).toContain(journal);
});

it('compacts into one snapshot that other instances switch to, keeping versions and fencing tokens', async () => {
  const directory = freshDirectory();
  const writer = await open(directory, { compactBytes: 2048 });
  const reader = await open(directory);
  const grant = await writer.leases.acquire('leader', 'a', 60_000);
  expect(await writer.leases.release('leader', 'a', grant!.token)).toBe(true);
  await writer.cursors.advance('cursor', new Date(1_000), 60_000);
  for (let i = 0; i < 25; i++) {
    await put(writer, `keep/${i % 10}`);
    await writer.store.transact(async (tx) => {
      await tx.schedule(`drop/${i}`, later, message('drop'));
      await tx.cancelSchedulePrefix('drop/');
    });
  }
  const journal = readFileSync(join(directory, 'journal.jsonl'), 'utf8');
  expect(journal.split('\n')[0]).toMatch(/^[0-9a-f]{16} \{"s":/);
  expect(journal.length).toBeLessThan(8192);
  const expected = await writer.store.listSchedules();
  expect(expected).toHaveLength(10);
  expect(await reader.store.listSchedules()).toEqual(expected);
  expect(await (await open(directory)).store.listSchedules()).toEqual(expected);
  expect((await reader.leases.acquire('leader', 'b', 60_000))?.token).toBeGreaterThan(grant!.token);
  expect((await reader.cursors.read('cursor'))?.getTime()).toBe(1_000);
  await put(reader, 'keep/0');
  expect((await writer.store.loadSchedule('keep/0'))!.version).toBeGreaterThan(expected[0]!.version);
});

it('tells a watching instance about schedules another instance commits, with the earliest deadline', async () => {
  const directory = freshDirectory();
  const watching = await open(directory);
  const other = await open(directory);
  const changes: StoreChange[] = [];
  const stop = watching.store.onChange((change) => changes.push(change));
  try {
    await other.store.transact(async (tx) => {
      await tx.schedule('w/2', new Date(later.getTime() + 1000), message('w'));
      await tx.schedule('w/1', later, message('w'));
    });
    const change = await waitFor('a remote change', () => changes.find((c) => c.remote));
    expect(change.earliest?.getTime()).toBe(later.getTime());
  } finally {
    stop();
  }
});
