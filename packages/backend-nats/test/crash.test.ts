import { freshNamespace } from '@duetime/conformance';
import { aggregate, type Backend } from '@duetime/core';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { connectNats } from '../src/index.js';
import { NatsIo } from '../src/io.js';
import { layout } from '../src/layout.js';
import { deleteOpened, NATS_URL, openOn } from './adapter.js';
import { type Child, spawnScript } from './fixtures/spawn.js';

const marks = aggregate({ type: 'crash-marks', initial: 0, apply: { marked: (n: number) => n + 1 } });
const COUNT = 40;

describe('a process killed while its transaction is being applied', () => {
  const children: Child[] = [];
  const backends: Backend[] = [];
  afterEach(async () => {
    await Promise.all(children.splice(0).map((c) => c.kill()));
    await Promise.all(backends.splice(0).map((b) => b.close()));
  });
  afterAll(deleteOpened, 60_000);

  /** What the killed process left in the state stream: an open plan (and how far it got), or none. */
  async function chain(namespace: string): Promise<{ open: boolean; written: number }> {
    const nc = await connectNats(NATS_URL);
    try {
      const io = await NatsIo.open(nc, 5000);
      const l = layout(namespace);
      const head = await io.last(l.stateStream, l.head);
      const last = await io.lastSeq(l.stateStream);
      const open = head?.header('Duetime-Kind') === 'plan';
      return { open, written: open && head ? last - head.seq : 0 };
    } finally {
      await nc.close();
    }
  }

  /** Runs the worker until it stops at `mode`, kills it, and opens a backend in this process. */
  async function crashAt(
    mode: string,
  ): Promise<{ backend: Backend; stopped: string; left: { open: boolean; written: number } }> {
    const namespace = freshNamespace();
    // Opening here first creates the streams and registers the namespace for clean-up.
    backends.push(await openOn(NATS_URL, namespace));
    const child = spawnScript('./crash-worker.ts', [NATS_URL, namespace, mode, String(COUNT)]);
    children.push(child);
    const stopped = await child.line(/^STOPPED /);
    await child.kill();
    const left = await chain(namespace);
    const backend = await openOn(NATS_URL, namespace, { stallMs: 200 });
    backends.push(backend);
    return { backend, stopped, left };
  }

  async function expectWholeTransaction(backend: Backend): Promise<void> {
    const schedules = await backend.store.listSchedules();
    expect(schedules.map((s) => s.key)).toEqual(
      Array.from({ length: COUNT }, (_, i) => `crash/${String(i).padStart(3, '0')}`),
    );
    expect(new Set(schedules.map((s) => s.version)).size).toBe(COUNT);
    const events = await backend.store.loadEvents('crash-marks');
    expect(events.map((e) => e.sequence)).toEqual([1, 2, 3]);
    expect(await backend.store.driver.nextDueAt()).toEqual(new Date(Date.UTC(2030, 0, 1)));
    const due = await backend.store.driver.dueSchedules(new Date(Date.UTC(2030, 0, 1) + 4500), 100);
    expect(due.map((s) => s.key)).toEqual(['crash/000', 'crash/001', 'crash/002', 'crash/003', 'crash/004']);
  }

  /** The state keeps working: a new transaction on top of the recovered one commits and is seen. */
  async function expectUsable(backend: Backend): Promise<void> {
    await backend.store.transact(async (tx) => {
      await tx.cancelSchedulePrefix('crash/00');
      await tx.exec(marks, 'crash-marks', (_s, ag) => ag.raise('marked', { after: true }));
    });
    expect(await backend.store.listSchedules()).toHaveLength(COUNT - 10);
    expect((await backend.store.loadEvents('crash-marks')).at(-1)?.sequence).toBe(4);
  }

  it('after the commit reached the log, before anything was applied: another process applies it', async () => {
    const { backend, stopped, left } = await crashAt('after-append');
    expect(stopped).toMatch(/^STOPPED after-append \d+$/);
    expect(left).toEqual({ open: false, written: 0 });
    await expectWholeTransaction(backend);
    await expectUsable(backend);
  });

  it('after claiming the plan, before writing any of it: another process takes the plan over', async () => {
    const { backend, stopped, left } = await crashAt('before-write:1');
    expect(stopped).toMatch(/^STOPPED before-write 1 /);
    expect(left).toEqual({ open: true, written: 0 });
    await expectWholeTransaction(backend);
    await expectUsable(backend);
  });

  it('in the middle of writing the plan: another process finishes the same writes', async () => {
    const { backend, stopped, left } = await crashAt('before-write:20');
    expect(stopped).toMatch(/^STOPPED before-write 20 /);
    expect(left).toEqual({ open: true, written: 19 });
    await expectWholeTransaction(backend);
    await expectUsable(backend);
  });

  it('before writing the meta record that completes the plan: another process writes it', async () => {
    const { backend, stopped, left } = await crashAt('before-write:last');
    expect(stopped).toMatch(/^STOPPED before-write last /);
    expect(left.open).toBe(true);
    expect(left.written).toBeGreaterThan(COUNT);
    await expectWholeTransaction(backend);
    await expectUsable(backend);
  });
});
