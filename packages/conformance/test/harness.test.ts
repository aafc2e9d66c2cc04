import { describe, expect, it } from 'vitest';
import { freshNamespace, Harness, resolveCapabilities, waitFor } from '../src/index.js';
import { drop, namespacesHeld, open } from './memory-adapter.js';

describe('conformance harness', () => {
  it('promises every guarantee unless a weaker one is declared', () => {
    expect(resolveCapabilities()).toEqual({
      multiProcess: true,
      durable: true,
      sql: false,
      exclusiveClaims: false,
      dueOrder: true,
      pushChannel: true,
    });
    expect(resolveCapabilities({ durable: false })).toMatchObject({ durable: false, multiProcess: true });
  });

  it('makes namespaces that are fresh and safe as schema names, key prefixes and stream tokens', () => {
    const names = new Set(Array.from({ length: 1000 }, () => freshNamespace()));
    expect(names.size).toBe(1000);
    for (const name of names) expect(name).toMatch(/^[a-z][a-z0-9]{1,62}$/);
  });

  it('drops the data of every namespace a test used once its backends are closed', async () => {
    const dropped: string[] = [];
    const capabilities = resolveCapabilities({ multiProcess: false, durable: false });
    const harness = new Harness(
      {
        name: 'memory',
        open,
        drop: async (namespace) => {
          dropped.push(namespace);
          await drop(namespace);
        },
      },
      capabilities,
    );
    const held = namespacesHeld();
    const a = await harness.open();
    const again = await harness.open(a.namespace);
    const b = await harness.open();
    expect(namespacesHeld()).toBe(held + 2);
    await harness.cleanup();
    expect(dropped.sort()).toEqual([a.namespace, b.namespace].sort());
    expect(namespacesHeld()).toBe(held);
    await expect(again.store.listSchedules()).rejects.toThrow(/closed/);

    const failing = new Harness(
      { name: 'memory', open, drop: async () => Promise.reject(new Error('permission denied')) },
      capabilities,
    );
    await failing.open();
    await expect(failing.cleanup()).rejects.toThrow(/drop\(namespace\) failed for 1 namespace/);
  });

  it('waitFor resolves with the first truthy value and reports what it waited for on timeout', async () => {
    let n = 0;
    expect(await waitFor('n to reach 3', () => (++n >= 3 ? n : 0), { intervalMs: 1 })).toBe(3);
    await expect(
      waitFor('something that never happens', () => false, { timeoutMs: 50, intervalMs: 5 }),
    ).rejects.toThrow(/timed out after 50 ms waiting for something that never happens/);
  });

  it('runs a role in a child process, reads its markers, and stops it cleanly', async () => {
    const harness = new Harness(
      { name: 'memory', open, module: new URL('./memory-adapter.ts', import.meta.url) },
      resolveCapabilities(),
    );
    try {
      const worker = harness.spawn('dispatch', freshNamespace());
      expect(await worker.line(/^READY$/)).toBe('READY');
      expect(await worker.stop()).toBe(0);
      const killed = harness.spawn('dispatch', freshNamespace());
      await killed.line(/^READY$/);
      await killed.kill();
      expect(killed.child.signalCode).toBe('SIGKILL');
    } finally {
      await harness.cleanup();
    }
  }, 60_000);

  it('reports a worker that dies before printing the awaited marker, with its stderr', async () => {
    const harness = new Harness(
      { name: 'memory', open, module: new URL('./missing-module.ts', import.meta.url) },
      resolveCapabilities(),
    );
    try {
      const worker = harness.spawn('dispatch', freshNamespace());
      await expect(worker.line(/^READY$/)).rejects.toThrow(/exited \(1\) before printing/);
    } finally {
      await harness.cleanup();
    }
  }, 60_000);
});
