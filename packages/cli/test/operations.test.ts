import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { intervalFrom, ManualClock, recurring } from '@duetime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliIo, runCli } from '../src/index.js';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const dir = mkdtempSync(join(tmpdir(), 'duetime-cli-ops-'));
const file = join(dir, 'ops.db');
const db = `sqlite:${file}`;
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

async function run(...args: string[]) {
  const t = io();
  const code = await runCli(['schedules', ...args, '--backend', db], t.io);
  return { code, out: t.text(), err: t.errors() };
}

/** Reads one schedule as `show --json` prints it. */
async function shown(key: string) {
  const { code, out } = await run('show', key, '--json');
  expect(code).toBe(0);
  return JSON.parse(out) as {
    at: string;
    version: number;
    paused?: { at: string; note?: string };
    queued?: { at: string; kind: string; id?: string }[];
  };
}

const now = Date.now();
/**
 * Every 10 minutes, at now − 55 min, − 45, …, − 5 and then now + 5: written by a store whose clock reads
 * an hour ago, so its pending occurrence (now − 55 min) and five after it are past by the time it resumes.
 */
const anchor = new Date(now - 55 * MINUTE);

beforeAll(async () => {
  const backend = await createSqliteBackend({ filename: file }, { clock: new ManualClock(now - HOUR) });
  await backend.store.transact(async (tx) => {
    await tx.schedule('invoice/1/remind', new Date(now + HOUR), { type: 'invoice.remind' });
    await tx.schedule('digest/daily', recurring(intervalFrom(10 * MINUTE, anchor)), { type: 'digest' });
  });
  await backend.close();
});

describe('duetime schedules pause, resume and trigger (SQLite)', () => {
  it('pauses a schedule with a note, says so when it is paused already, and resumes it', async () => {
    const paused = await run('pause', 'invoice/1/remind', '--note', 'customer on holiday');
    expect(paused).toMatchObject({ code: 0, err: '' });
    expect(paused.out).toContain('paused invoice/1/remind');
    const after = await shown('invoice/1/remind');
    expect(after.paused?.note).toBe('customer on holiday');
    const text = await run('show', 'invoice/1/remind');
    expect(text.out).toContain('paused:     since');
    expect(text.out).toContain('(paused)');
    const again = await run('pause', 'invoice/1/remind', '--json');
    expect(again.code).toBe(0);
    expect(JSON.parse(again.out)).toEqual({ key: 'invoice/1/remind', paused: false });
    const resumed = await run('resume', 'invoice/1/remind', '--json');
    expect(resumed.code).toBe(0);
    expect(JSON.parse(resumed.out)).toEqual({ key: 'invoice/1/remind', resumed: true, caughtUp: [] });
    expect((await shown('invoice/1/remind')).paused).toBeUndefined();
    const twice = await run('resume', 'invoice/1/remind');
    expect(twice).toMatchObject({ code: 0, out: 'invoice/1/remind was not paused; nothing changed' });
  });

  it('resumes a recurring schedule under the catch-up rule given: the latest missed run now, the older reported', async () => {
    expect((await run('pause', 'digest/daily')).code).toBe(0);
    const resumed = await run('resume', 'digest/daily', '--catch-up', '2', '--json');
    expect(resumed.code).toBe(0);
    const at = (m: number) => new Date(anchor.getTime() + m * MINUTE).toISOString();
    expect(JSON.parse(resumed.out)).toEqual({
      key: 'digest/daily',
      resumed: true,
      caughtUp: [at(40), at(50)],
      missed: { count: 4, first: at(0), last: at(30) },
    });
    const after = await shown('digest/daily');
    expect(after.at).toBe(at(60));
    expect(after.queued?.map((q) => [q.at, q.kind])).toEqual([
      [at(40), 'occurrence'],
      [at(50), 'occurrence'],
    ]);
  });

  it('triggers an extra delivery with an occurrence id of its own, without moving the deadline', async () => {
    const before = await shown('invoice/1/remind');
    const when = '2031-01-01T00:00:00.000Z';
    const triggered = await run('trigger', 'invoice/1/remind', '--at', when, '--json');
    expect(triggered.code).toBe(0);
    const { occurrence, at } = JSON.parse(triggered.out) as { occurrence: string; at: string };
    expect(occurrence).toMatch(/^[0-9a-f]{32}$/);
    expect(at).toBe(when);
    const after = await shown('invoice/1/remind');
    expect(after.at).toBe(before.at);
    expect(after.version).toBeGreaterThan(before.version);
    expect(after.queued).toEqual([{ at: when, kind: 'trigger', id: occurrence }]);
    const now_ = await run('trigger', 'invoice/1/remind');
    expect(now_.code).toBe(0);
    expect(now_.out).toMatch(
      /^triggered invoice\/1\/remind: one extra delivery now \(occurrence [0-9a-f]{32}\)/,
    );
  });

  it('answers a key with no schedule with a NotFoundError (exit 1), and bad arguments before opening the store', async () => {
    for (const op of ['pause', 'resume', 'trigger']) {
      const missing = await run(op, 'nothing/here');
      expect(missing.code).toBe(1);
      expect(missing.out).toBe('');
      expect(missing.err).toBe(
        `duetime schedules: no active schedule under "nothing/here" [DUETIME_NOT_FOUND]`,
      );
      expect((await run(op)).code).toBe(2);
    }
    const rule = await run('resume', 'digest/daily', '--catch-up', 'some');
    expect(rule.code).toBe(3);
    expect(rule.err).toContain('--catch-up');
    expect((await run('trigger', 'digest/daily', '--at', 'tomorrow')).code).toBe(3);
    // Checked before the backend is opened: a store that is not there is never reached (nor created).
    const t = io();
    expect(
      await runCli(['schedules', 'resume', 'a/b', '--catch-up', '0', '--backend', 'sqlite:./none.db'], t.io),
    ).toBe(3);
    expect(existsSync(join(dir, 'none.db'))).toBe(false);
  });
});
