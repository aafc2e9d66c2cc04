import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../src/main.js';

const dir = mkdtempSync(join(tmpdir(), 'calendar-example-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the calendar example', () => {
  it('fails over from a SIGKILLed leader: every tick runs once, the missed ones caught up, none twice', async () => {
    const lines: string[] = [];
    const outcome = await main({
      file: join(dir, 'demo.db'),
      before: 4000,
      after: 5000,
      print: (l) => lines.push(l),
    });
    const runners = new Set(outcome.ticks.map((t) => t.replica));
    expect(runners).toEqual(new Set(['replica-a', 'replica-b']));
    expect(outcome.duplicates).toEqual([]);
    expect(outcome.gaps).toEqual([]);
    // The ticks that fell due while nobody led were run by the survivor, late (catch-up) or within grace.
    const lastOfA = Math.max(...outcome.ticks.filter((t) => t.replica === 'replica-a').map((t) => t.at));
    const firstOfB = Math.min(...outcome.ticks.filter((t) => t.replica === 'replica-b').map((t) => t.at));
    expect(firstOfB).toBe(lastOfA + 1000);
    expect(outcome.ticks.length).toBeGreaterThanOrEqual(8);
    // Each tick carries the fencing token of the epoch it ran in; the survivor's is larger.
    const epochsOf = (name: string) =>
      new Set(outcome.ticks.filter((t) => t.replica === name).map((t) => t.epoch));
    const [epochA] = [...epochsOf('replica-a')];
    const [epochB] = [...epochsOf('replica-b')];
    expect(epochsOf('replica-a').size).toBe(1);
    expect(epochsOf('replica-b').size).toBe(1);
    expect(epochB).toBeGreaterThan(epochA as number);
    expect(lines.some((l) => l.includes(`leads the group (fencing token ${epochB})`))).toBe(true);
    // A 4-second report every 3 seconds without overlap: some occurrences found the previous one running.
    expect(outcome.overlapBusy).toBeGreaterThanOrEqual(1);
    expect(outcome.takeoverMs).toBeGreaterThan(0);
    expect(lines.some((l) => l.includes('replica-b') && l.includes('leads the group'))).toBe(true);
  }, 120_000);
});
