import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectNats, createNatsBackend, deleteNatsBackendData } from '@duetime/backend-nats';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers } from '@nats-io/transport-node';
import { afterAll, describe, expect, it } from 'vitest';
import { type CliIo, runCli } from '../src/index.js';

const NATS_URL = process.env.DUETIME_NATS_NEW_URL ?? 'nats://127.0.0.1:4223';
const dir = mkdtempSync(join(tmpdir(), 'duetime-cli-migrate-'));
const prefixes: string[] = [];

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  const nc = await connectNats(NATS_URL);
  for (const prefix of prefixes) await deleteNatsBackendData(nc, prefix).catch(() => {});
  await nc.close();
});

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

/** The smallest store of the earlier format at rest: a meta record and one schedule record. */
async function legacyStore(prefix: string): Promise<void> {
  const nc = await connectNats(NATS_URL);
  try {
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    await jsm.streams.add({
      name: `${prefix}_state`,
      subjects: [`${prefix}.st.>`],
      max_msgs_per_subject: 2,
      allow_direct: true,
    });
    const record = {
      key: 'order/1/expire',
      at: Date.now() + 3_600_000,
      dueAt: Date.now() + 3_600_000,
      version: 9,
      attempts: 0,
      message: { type: 'expire' },
    };
    await js.publish(`${prefix}.st.rec.x`, JSON.stringify(record));
    const h = headers();
    h.set('Duetime-Kind', 'meta');
    await js.publish(`${prefix}.st.head`, JSON.stringify({ v: 1, applied: 0, version: 9 }), { headers: h });
  } finally {
    await nc.close();
  }
}

describe('duetime migrate', () => {
  it('reports what would move with --dry-run, moves it, and then the store opens', async () => {
    const prefix = `cli${randomBytes(5).toString('hex')}`;
    prefixes.push(prefix);
    await legacyStore(prefix);
    const backend = `${NATS_URL}?prefix=${prefix}`;
    const dry = io();
    expect(await runCli(['migrate', '--backend', backend, '--dry-run'], dry.io)).toBe(0);
    expect(dry.text()).toBe(
      `would move 1 pending schedule and 0 events of 0 aggregates of prefix ${prefix} (nothing written)`,
    );
    const done = io();
    expect(await runCli(['migrate', '--backend', backend, '--json'], done.io)).toBe(0);
    expect(JSON.parse(done.text())).toMatchObject({
      prefix,
      schedules: 1,
      versionBase: 9,
      deleted: [`${prefix}_state`],
    });
    const opened = await createNatsBackend({ servers: NATS_URL }, { prefix });
    try {
      expect((await opened.store.loadSchedule('order/1/expire'))?.version).toBe(9);
    } finally {
      await opened.close();
    }
  });

  it('refuses a URL of another backend, and a call without --backend, with the documented exit codes', async () => {
    const sqlite = io();
    expect(await runCli(['migrate', '--backend', 'sqlite:./x.db'], sqlite.io)).toBe(3);
    expect(sqlite.errors()).toMatch(/only the NATS backend has a store format to migrate/);
    const none = io();
    expect(await runCli(['migrate'], none.io)).toBe(2);
    expect(none.errors()).toMatch(/migrate needs --backend/);
  });
});
