import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { Dispatcher, parseCron, recurring, UnrecoverableError } from '@duetime/core';
import { afterAll, describe, expect, it } from 'vitest';
import { type CliIo, runCli } from '../src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'duetime-cli-dead-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function io() {
  const out: string[] = [];
  const err: string[] = [];
  const value: CliIo = {
    out: (t) => out.push(t),
    err: (t) => err.push(t),
    confirm: async () => false,
    env: {},
    cwd: dir,
    isTTY: false,
  };
  return { io: value, text: () => out.join('\n'), errors: () => err.join('\n') };
}

/** A SQLite store with two dead letters (a processor that gives up on `bad/*` at once). */
async function storeWithDeadLetters(file: string): Promise<void> {
  const backend = await createSqliteBackend({ filename: file });
  const now = Date.now();
  await backend.store.transact(async (tx) => {
    await tx.schedule('bad/1', new Date(now - 1000), { type: 'charge', data: { n: 1 } });
    await tx.schedule('bad/2', new Date(now - 1000), { type: 'charge', data: { n: 2 } });
  });
  const dispatcher = new Dispatcher({
    store: backend.store,
    logger: { debug() {}, info() {}, warn() {}, error() {} },
    processor: async () => {
      throw new UnrecoverableError('card declined');
    },
  });
  const controller = new AbortController();
  const running = dispatcher.run(controller.signal);
  const deadline = Date.now() + 20_000;
  while ((await backend.store.pageDeadLetters({})).items.length < 2 && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 20));
  controller.abort();
  await running;
  await backend.close();
}

describe('duetime schedules: dead letters and recurring schedules', () => {
  it('lists dead letters with their errors, retries one under another key, and discards the other', async () => {
    const file = join(dir, 'dead.db');
    await storeWithDeadLetters(file);
    const backend = `sqlite:${file}`;
    const listed = io();
    expect(await runCli(['schedules', 'list', '--dead', '--backend', backend], listed.io)).toBe(0);
    expect(listed.text()).toMatch(/bad\/1 .*UnrecoverableError: card declined/);
    expect(listed.text().split('\n').at(-1)).toBe('2 dead letters');
    const json = io();
    await runCli(['schedules', 'list', '--dead', '--json', '--backend', backend], json.io);
    expect(JSON.parse(json.text())).toMatchObject([
      { key: 'bad/1', attempts: 1, error: 'UnrecoverableError: card declined', message: { data: { n: 1 } } },
      { key: 'bad/2' },
    ]);
    const retried = io();
    expect(
      await runCli(
        [
          'schedules',
          'retry',
          'bad/1',
          '--as',
          'retry/1',
          '--at',
          '2030-01-01T00:00:00Z',
          '--backend',
          backend,
        ],
        retried.io,
      ),
    ).toBe(0);
    expect(retried.text()).toBe(
      'scheduled retry/1 again at 2030-01-01T00:00:00.000Z; the dead letter is removed',
    );
    const shown = io();
    await runCli(['schedules', 'show', 'retry/1', '--json', '--backend', backend], shown.io);
    expect(JSON.parse(shown.text())).toMatchObject({
      key: 'retry/1',
      at: '2030-01-01T00:00:00.000Z',
      attempts: 0,
      message: { data: { n: 1 } },
    });
    const discarded = io();
    expect(await runCli(['schedules', 'discard', 'bad/2', '--backend', backend], discarded.io)).toBe(0);
    const again = io();
    expect(await runCli(['schedules', 'discard', 'bad/2', '--backend', backend], again.io)).toBe(1);
    expect(again.text()).toBe('no dead letter under "bad/2"');
    const empty = io();
    await runCli(['schedules', 'list', '--dead', '--backend', backend], empty.io);
    expect(empty.text()).toBe('no dead letters');
  }, 30_000);

  it('shows a recurring schedule with its spec, runs and next occurrences, ending where the recurrence ends', async () => {
    const file = join(dir, 'recurring.db');
    const backend = await createSqliteBackend({ filename: file });
    await backend.store.transact((tx) =>
      tx.schedule(
        'tenant/42/digest',
        recurring(parseCron('0 9 * * MON', 'America/New_York'), {
          startAt: new Date('2030-03-01T00:00:00Z'),
          maxOccurrences: 3,
        }),
        { type: 'digest.send', data: { tenant: 42 } },
      ),
    );
    await backend.close();
    const shown = io();
    expect(
      await runCli(['schedules', 'show', 'tenant/42/digest', '--backend', `sqlite:${file}`], shown.io),
    ).toBe(0);
    const text = shown.text();
    expect(text).toContain('recurs:     cron 0 9 * * MON America/New_York');
    expect(text).toContain('runs:       0 so far of at most 3; catch-up latest');
    // Mondays at 09:00 in New York: EST on 4 March, EDT (after 10 March) on the 11th and 18th.
    expect(text).toMatch(
      /upcoming: {3}2030-03-04T14:00:00\.000Z\n {12}2030-03-11T13:00:00\.000Z\n {12}2030-03-18T13:00:00\.000Z\n {12}\(then the recurrence ends\)/,
    );
    const listed = io();
    await runCli(['schedules', 'list', '--backend', `sqlite:${file}`], listed.io);
    expect(listed.text()).toMatch(/tenant\/42\/digest .*cron 0 9 \* \* MON America\/New_York/);
    const json = io();
    await runCli(['schedules', 'show', 'tenant/42/digest', '--json', '--backend', `sqlite:${file}`], json.io);
    expect(JSON.parse(json.text()).recurrence).toMatchObject({
      description: 'cron 0 9 * * MON America/New_York',
      count: 0,
      maxOccurrences: 3,
      upcoming: ['2030-03-04T14:00:00.000Z', '2030-03-11T13:00:00.000Z', '2030-03-18T13:00:00.000Z'],
    });
  });

  it('refuses --through with --dead, and retry or discard without a key, as usage errors', async () => {
    const a = io();
    expect(await runCli(['schedules', 'list', '--dead', '--through', '2030-01-01T00:00:00Z'], a.io)).toBe(2);
    const b = io();
    expect(await runCli(['schedules', 'retry'], b.io)).toBe(2);
    const c = io();
    expect(await runCli(['schedules', 'discard'], c.io)).toBe(2);
  });
});
