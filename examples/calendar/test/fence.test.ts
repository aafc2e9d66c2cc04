import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import type { Invocation } from '@duetime/core';
import { afterAll, describe, expect, it } from 'vitest';
import { declarations, StaleLeaderError, TICK_LOG, type TickRun } from '../src/declarations.js';

const dir = mkdtempSync(join(tmpdir(), 'calendar-fence-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the calendar example's tick log", () => {
  it('refuses a tick from an older leadership epoch once a newer one has written', async () => {
    const backend = await createSqliteBackend({ filename: join(dir, 'fence.db') });
    try {
      const lines: string[] = [];
      const tick = declarations(backend.store, 'test', (l) => lines.push(l)).get('tick');
      const run = (epoch: number, at: number) => {
        const invocation: Invocation = {
          schedule: 'tick',
          occurrence: `occurrence-${at}`,
          intendedAt: new Date(at),
          origin: 'scheduled',
          epoch,
        };
        return tick?.handler({ signal: new AbortController().signal, invocation });
      };
      await run(1, 1000);
      await run(2, 2000); // a new leader writes
      await expect(run(1, 3000)).rejects.toBeInstanceOf(StaleLeaderError); // the deposed one, late
      await run(2, 3000);
      const ticks = (await backend.store.loadEvents(TICK_LOG)).map((e) => e.data as TickRun);
      expect(ticks.map((t) => [t.at, t.epoch])).toEqual([
        [1000, 1],
        [2000, 2],
        [3000, 2],
      ]);
    } finally {
      await backend.close();
    }
  });
});
