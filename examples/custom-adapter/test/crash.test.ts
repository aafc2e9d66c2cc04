import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { createFileBackend } from '../src/file-backend.js';

const directory = mkdtempSync(join(tmpdir(), 'duetime-file-journal-crash-'));
afterAll(() => rmSync(directory, { recursive: true, force: true }));

const writer = fileURLToPath(new URL('./fixtures/writer.ts', import.meta.url));
const tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

/** Starts a writer; resolves once it has committed `commits` transactions, then SIGKILLs it after `delayMs`. */
async function runAndKill(name: string, commits: number, delayMs: number): Promise<void> {
  const child = spawn(process.execPath, ['--import', tsx, '--conditions=source', writer, directory, name], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let seen = 0;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      seen += chunk.split('\n').filter((l) => l.startsWith('COMMITTED')).length;
      if (seen >= commits) resolve();
    });
    void exited.then(() => reject(new Error(`writer ${name} exited early: ${stderr}`)));
  });
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  child.kill('SIGKILL');
  await exited;
}

it('keeps every transaction whole when writers are SIGKILLed at random moments, compactions included', async () => {
  // Two rounds of three concurrent writers, each killed at an arbitrary point of its loop.
  for (let round = 0; round < 2; round++) {
    await Promise.all(
      ['a', 'b', 'c'].map((name) => runAndKill(`${name}${round}`, 5, Math.floor(Math.random() * 40))),
    );
  }
  const backend = await createFileBackend({ directory });
  try {
    const groups = new Map<string, number>();
    for (const s of await backend.store.listSchedules()) {
      const group = s.key.slice(0, s.key.indexOf('/'));
      groups.set(group, (groups.get(group) ?? 0) + 1);
    }
    // All ten schedules of a transaction, or none of them.
    expect([...groups.values()].every((n) => n === 10)).toBe(true);
    const events = await backend.store.loadEvents('crash');
    expect(events.map((e) => e.sequence)).toEqual(events.map((_, i) => i + 1));
    // Exactly the transactions whose event committed have their schedules.
    const committed = events.map((e) => {
      const { name, n } = e.data as { name: string; n: number };
      return `${name}-${n}`;
    });
    expect([...groups.keys()].sort()).toEqual([...committed].sort());
    expect(committed.length).toBeGreaterThanOrEqual(30);
    // The dead writers' locks do not block a new one.
    await backend.store.transact((tx) =>
      tx.schedule('after/crash', new Date(), { type: 'x', aggregateId: 'y' }),
    );
    expect((await backend.store.loadSchedule('after/crash'))?.version).toBeGreaterThan(committed.length * 10);
    // The journal was compacted along the way: it starts with a snapshot.
    expect(readFileSync(join(directory, 'journal.jsonl'), 'utf8').split('\n')[0]).toMatch(
      /^[0-9a-f]{16} \{"s":/,
    );
  } finally {
    await backend.close();
  }
}, 90_000);
