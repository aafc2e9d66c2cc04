import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { InvalidArgumentError } from '@duetime/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliIo, runCli } from '../src/index.js';
import { backendKind, natsServers, redact, sqliteFilename } from '../src/open-backend.js';

const dir = mkdtempSync(join(tmpdir(), 'duetime-cli-'));
const db = `sqlite:${join(dir, 'cli.db')}`;

function io(options: { confirm?: boolean; env?: Record<string, string> } = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const value: CliIo = {
    out: (t) => out.push(t),
    err: (t) => err.push(t),
    confirm: async () => options.confirm ?? false,
    env: { ...options.env },
    cwd: dir,
    isTTY: false,
  };
  return { io: value, out, err, text: () => out.join('\n'), errors: () => err.join('\n') };
}

beforeAll(async () => {
  const backend = await createSqliteBackend({ filename: join(dir, 'cli.db') });
  await backend.store.transact(async (tx) => {
    await tx.schedule('order/1/expire', new Date('2030-01-01T00:00:00Z'), {
      type: 'order.expire',
      aggregateId: '1',
    });
    await tx.schedule('order/2/expire', new Date('2030-01-02T00:00:00Z'), {
      type: 'order.expire',
      aggregateId: '2',
      data: { n: 2 },
    });
    await tx.schedule('invoice/9/remind', new Date('2030-01-03T00:00:00Z'), {
      type: 'invoice.remind',
      aggregateId: '9',
    });
  });
  await backend.close();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('duetime next and validate', () => {
  it('prints occurrences in local and UTC time, marking a repeated hour', async () => {
    const t = io();
    expect(
      await runCli(
        ['next', '30 1 * * *', '--tz', 'America/New_York', '--from', '2026-10-31T12:00:00Z', '-n', '2'],
        t.io,
      ),
    ).toBe(0);
    expect(t.text()).toContain('2026-11-01T05:30:00.000Z  repeated hour (first)');
    expect(t.text()).toContain('2026-11-01T06:30:00.000Z  repeated hour (second)');
  });

  it('marks a time shifted out of a DST gap, and prints JSON on request', async () => {
    const t = io();
    const code = await runCli(
      [
        'next',
        '30 2 * * *',
        '--tz',
        'America/New_York',
        '--from',
        '2026-03-07T12:00:00Z',
        '-n',
        '1',
        '--dst',
        'shift',
        '--json',
      ],
      t.io,
    );
    expect(code).toBe(0);
    expect(JSON.parse(t.text())).toMatchObject({
      zone: 'America/New_York',
      occurrences: [{ utc: '2026-03-08T07:00:00.000Z', offset: '-04:00', dst: 'shifted out of a DST gap' }],
    });
  });

  it('validates, and reports a bad expression in one line naming the field, with exit code 3', async () => {
    const ok = io();
    expect(await runCli(['validate', '0 9 * * MON-FRI', '--tz', 'Europe/Berlin'], ok.io)).toBe(0);
    expect(ok.text()).toMatch(/^valid: 0 9 \* \* MON-FRI in Europe\/Berlin; next /);
    const bad = io();
    expect(await runCli(['validate', '0 0 30 2 *', '--tz', 'UTC'], bad.io)).toBe(3);
    expect(bad.err).toHaveLength(1);
    expect(bad.errors()).toMatch(/dayOfMonth "30".*DUETIME_CRON_SYNTAX/);
    expect(bad.errors()).not.toMatch(/\n\s+at /);
    const zone = io();
    expect(await runCli(['next', '* * * * *', '--tz', 'local'], zone.io)).toBe(3);
    expect(zone.errors()).toContain('DUETIME_INVALID_ZONE');
  });

  it('takes --zone as another name for --tz, and refuses the two naming different zones', async () => {
    const args = ['30 1 * * *', '--from', '2026-10-31T12:00:00Z', '-n', '2', '--json'];
    const tz = io();
    expect(await runCli(['next', ...args, '--tz', 'America/New_York'], tz.io)).toBe(0);
    const zone = io();
    expect(await runCli(['next', ...args, '--zone', 'America/New_York'], zone.io)).toBe(0);
    expect(zone.text()).toBe(tz.text());
    const same = io();
    expect(await runCli(['next', ...args, '--tz', 'UTC', '--zone', 'UTC'], same.io)).toBe(0);
    const valid = io();
    expect(await runCli(['validate', '0 9 * * *', '--zone', 'Europe/Berlin'], valid.io)).toBe(0);
    expect(valid.text()).toMatch(/^valid: 0 9 \* \* \* in Europe\/Berlin; next /);
    const both = io();
    expect(await runCli(['next', ...args, '--tz', 'UTC', '--zone', 'Europe/Berlin'], both.io)).toBe(2);
    expect(both.errors()).toContain('--tz "UTC" and --zone "Europe/Berlin" disagree');
    const badZone = io();
    expect(await runCli(['validate', '0 9 * * *', '--zone', 'Mars/Olympus'], badZone.io)).toBe(3);
    expect(badZone.errors()).toContain('DUETIME_INVALID_ZONE');
  });

  it('prints a stack trace only with --verbose', async () => {
    const t = io();
    expect(await runCli(['validate', '61 * * * *', '--tz', 'UTC', '--verbose'], t.io)).toBe(3);
    expect(t.errors()).toMatch(/\n\s+at /);
  });

  it('answers usage errors with exit code 2 and help with 0', async () => {
    const missing = io();
    expect(await runCli(['next', '* * * * *'], missing.io)).toBe(2);
    expect(missing.errors()).toContain('--tz');
    const unknown = io();
    expect(await runCli(['next', '* * * * *', '--tz', 'UTC', '--bogus'], unknown.io)).toBe(2);
    expect(await runCli(['frobnicate'], io().io)).toBe(2);
    for (const command of ['next', 'validate', 'schedules', 'describe', 'run', 'conformance']) {
      const help = io();
      expect(await runCli([command, '--help'], help.io)).toBe(0);
      expect(help.text()).toMatch(/^Usage:/);
    }
    const main = io();
    expect(await runCli(['--help'], main.io)).toBe(0);
    expect(main.text()).toContain('Exit codes');
  });
});

describe('duetime schedules', () => {
  it('lists, filters by prefix and deadline, and prints JSON', async () => {
    const all = io();
    expect(await runCli(['schedules', 'list', '--backend', db], all.io)).toBe(0);
    expect(all.text()).toContain('order/1/expire');
    expect(all.text()).toContain('3 schedules');
    const filtered = io();
    expect(
      await runCli(
        ['schedules', 'list', '--prefix', 'order/', '--through', '2030-01-01T12:00:00Z', '--json'],
        { ...filtered.io, env: { DUETIME_BACKEND: db } },
      ),
    ).toBe(0);
    expect(JSON.parse(filtered.text()).map((s: { key: string }) => s.key)).toEqual(['order/1/expire']);
  });

  it('shows one schedule, and exits 1 for a missing key', async () => {
    const t = io();
    expect(await runCli(['schedules', 'show', 'order/2/expire', '--backend', db], t.io)).toBe(0);
    expect(t.text()).toContain('data:       {"n":2}');
    expect(t.text()).toContain('attempts:   0 failed');
    expect(await runCli(['schedules', 'show', 'nope', '--backend', db], io().io)).toBe(1);
  });

  it('asks before cancelling several by prefix, and cancels with --yes', async () => {
    const refused = io({ confirm: false });
    expect(await runCli(['schedules', 'cancel', '--prefix', 'order/', '--backend', db], refused.io)).toBe(1);
    expect(refused.errors()).toContain('2 schedules match');
    const still = io();
    await runCli(['schedules', 'list', '--prefix', 'order/', '--json', '--backend', db], still.io);
    expect(JSON.parse(still.text())).toHaveLength(2);
    const done = io();
    expect(
      await runCli(['schedules', 'cancel', '--prefix', 'order/', '--yes', '--backend', db], done.io),
    ).toBe(0);
    expect(done.text()).toBe('cancelled 2 schedules');
    const one = io();
    expect(await runCli(['schedules', 'cancel', 'invoice/9/remind', '--backend', db], one.io)).toBe(0);
    expect(one.text()).toBe('cancelled invoice/9/remind');
  });

  it('rejects bad input with typed one-line errors', async () => {
    const badUrl = io();
    expect(await runCli(['schedules', 'list', '--backend', 'mysql://localhost/x'], badUrl.io)).toBe(3);
    expect(badUrl.errors()).toContain('unknown scheme');
    const badDate = io();
    expect(
      await runCli(['schedules', 'list', '--through', '2030-01-01T00:00:00', '--backend', db], badDate.io),
    ).toBe(3);
    expect(badDate.errors()).toContain('--through');
    expect(await runCli(['schedules', 'frob', '--backend', db], io().io)).toBe(2);
  });
});

describe('backend URLs', () => {
  it('resolves schemes, SQLite paths and NATS server lists, and hides passwords', () => {
    expect(backendKind('sqlite:./a.db')).toBe('sqlite');
    expect(backendKind('postgresql://u@h/db')).toBe('postgres');
    expect(backendKind('rediss://h:6380')).toBe('redis');
    expect(backendKind('nats://h:4222')).toBe('nats');
    expect(() => backendKind('ftp://x')).toThrow(/unknown scheme/);
    expect(() => backendKind('')).toThrow(/backend URL/);
    expect(sqliteFilename('sqlite:./a.db', '/srv')).toBe('/srv/a.db');
    expect(sqliteFilename('sqlite:///var/db/a.db', '/srv')).toBe('/var/db/a.db');
    // A malformed escape is a typed error naming the option, not a URIError (found by the reliability suite).
    expect(() => sqliteFilename('sqlite:%zz', '/srv')).toThrow(InvalidArgumentError);
    expect(() => sqliteFilename('sqlite:%zz', '/srv')).toThrow(/backend "sqlite:%zz"/);
    expect(natsServers('nats://a:4222,b:4223')).toEqual(['nats://a:4222', 'nats://b:4223']);
    expect(redact('postgres://user:secret@host/db')).toBe('postgres://user:***@host/db');
  });
});

describe('duetime describe', () => {
  it('prints each declaration with its next occurrences', async () => {
    const t = io();
    expect(
      await runCli(
        ['describe', fileURLToPath(new URL('./fixtures/registry.ts', import.meta.url)), '-n', '2'],
        t.io,
      ),
    ).toBe(0);
    expect(t.text()).toContain('heartbeat');
    expect(t.text()).toContain('nightly');
    expect(t.text()).toContain('3 declarations');
    // Only options a declaration sets are listed: `withoutOverlap` for `report`, nothing for the others.
    const lines = t.text().split('\n');
    expect(lines.find((l) => l.startsWith('report'))).toContain('timeout=60000, withoutOverlap');
    expect(lines.find((l) => l.startsWith('heartbeat'))).not.toContain('withoutOverlap');
    const json = io();
    await runCli(
      ['describe', fileURLToPath(new URL('./fixtures/registry.ts', import.meta.url)), '--json'],
      json.io,
    );
    expect(JSON.parse(json.text()).map((d: { id: string; next: string[] }) => [d.id, d.next.length])).toEqual(
      [
        ['heartbeat', 3],
        ['nightly', 3],
        ['report', 3],
      ],
    );
  });

  it('refuses a module without a Registry', async () => {
    const t = io();
    expect(
      await runCli(
        ['describe', fileURLToPath(new URL('./fixtures/broken-adapter.ts', import.meta.url))],
        t.io,
      ),
    ).toBe(3);
    expect(t.errors()).toContain('exports no Registry');
  });
});

const require = createRequire(import.meta.url);
const bin = fileURLToPath(new URL('../src/bin.ts', import.meta.url));

function cli(args: string[]) {
  const child = spawn(
    process.execPath,
    ['--import', pathToFileURL(require.resolve('tsx')).href, '--conditions=source', bin, ...args],
    {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    err += c;
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exit, out: () => out, err: () => err };
}

describe('duetime run and conformance (real processes)', () => {
  it('runs a registry with a dispatcher until SIGTERM, logging each occurrence, then drains and exits 0', async () => {
    const run = cli([
      'run',
      fileURLToPath(new URL('./fixtures/registry.ts', import.meta.url)),
      '--backend',
      `sqlite:${join(dir, 'run.db')}`,
      '--group',
      'cli-test',
    ]);
    const deadline = Date.now() + 60_000;
    while (!/heartbeat \S+ succeeded/.test(run.out()) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    expect(run.out()).toMatch(/heartbeat \S+ succeeded \[scheduled\]/);
    run.child.kill('SIGTERM');
    expect(await run.exit).toBe(0);
    expect(run.err()).toContain('with a dispatcher');
    expect(run.err()).toContain('stopped');
  }, 90_000);

  it('runs the conformance suite against an adapter module: a table per group, exit 0 when it passes and 1 when it fails', async () => {
    const good = cli([
      'conformance',
      fileURLToPath(new URL('../../conformance/test/memory-adapter.ts', import.meta.url)),
      '--only',
      'leases,cursors',
    ]);
    expect(await good.exit).toBe(0);
    expect(good.out()).toMatch(/leases\s+6\s+0\s+pass/);
    expect(good.out()).toContain('0 failed');
    // The memory adapter exports drop(namespace): every test's data was deleted, nothing to warn about.
    expect(good.err()).not.toContain('exports no drop');
    const bad = cli([
      'conformance',
      fileURLToPath(new URL('./fixtures/broken-adapter.ts', import.meta.url)),
      '--only',
      'leases',
      '--json',
    ]);
    expect(await bad.exit).toBe(1);
    const report = JSON.parse(bad.out()) as { failed: number; groups: { group: string; failed: number }[] };
    expect(report.failed).toBeGreaterThan(0);
    expect(report.groups.find((g) => g.group === 'leases')?.failed).toBeGreaterThan(0);
    expect(bad.err()).toContain('exports no drop(namespace), so the data the suite created');
  }, 180_000);
});
