import { occurrenceId } from '@duetime/core';
import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';
import { gapsAndDuplicates, loadRuns } from './fixtures.js';

const EVERY = 500;
const COMMON = { every: EVERY, leadershipTTL: 1500, pollInterval: 250 };
/** Generous: the promise is `leadershipTTL + pollInterval`; a loaded machine gets far more room. */
const TAKEOVER_DEADLINE = 30_000;

/** The number at position `index` of a marker line (`RECORD skipped/overlap_busy <id> <ms> <now>`). */
const field = (line: string, index: number): string => line.split(' ')[index] ?? '';

/**
 * Calendar failover across real processes: two schedulers on one backend, the leader SIGKILLed or cut
 * off from its leadership lease. Runs for backends that declare `multiProcess`.
 */
export function calendarFailoverTests({ harness }: SuiteContext): void {
  it('after the leader is SIGKILLed, the other process leads; missed occurrences run once, none twice', async () => {
    const { namespace, store } = await harness().open();
    const victim = harness().spawn('calendar', namespace, {
      ...COMMON,
      name: 'victim',
      catchUp: true,
      grace: 1000,
      hangAt: 4,
      drainWhenHanging: true,
    });
    await victim.line(/^LEADER /, TAKEOVER_DEADLINE);
    const survivor = harness().spawn('calendar', namespace, {
      ...COMMON,
      name: 'survivor',
      catchUp: true,
      grace: 1000,
    });
    await survivor.line(/^READY$/);
    const hanging = await victim.line(/^HANGING /, 60_000);
    await victim.kill();
    const killedAt = Date.now();
    await survivor.line(/^LEADER /, TAKEOVER_DEADLINE);
    const takeover = Date.now() - killedAt;
    await waitFor(
      'the survivor to run occurrences due after the failover',
      async () => (await loadRuns(store)).some((r) => r.runner === 'survivor' && r.at > killedAt + 4 * EVERY),
      { timeoutMs: 60_000 },
    );
    expect(await survivor.stop()).toBe(0);

    const runs = await loadRuns(store);
    expect(gapsAndDuplicates(runs, EVERY), `takeover took ${takeover} ms`).toBeUndefined();
    expect(runs.filter((r) => r.runner === 'victim').length).toBe(3);
    // The occurrence the victim died in, and those due while nobody led, ran once, on the survivor.
    const hungId = field(hanging, 1);
    expect(runs.filter((r) => r.occurrence === hungId).map((r) => r.runner)).toEqual(['survivor']);
    expect(runs.filter((r) => r.runner === 'survivor' && r.at < killedAt).length).toBeGreaterThanOrEqual(1);
    // Occurrence ids are the same whoever computes them.
    const scope = { namespace: 'duetime', environment: 'production', group: 'conformance' };
    for (const run of runs) expect(run.occurrence).toBe(occurrenceId(scope, 'tick', run.at));
  }, 120_000);

  it("blocks the new leader with the old epoch's overlap lease while the old handler still runs", async () => {
    const { namespace, store } = await harness().open();
    const overlap = { ...COMMON, withoutOverlap: true, overlapTTL: 1500, grace: 3000 };
    const old = harness().spawn('calendar', namespace, {
      ...overlap,
      name: 'old',
      hangAt: 2,
      holdMs: 8000,
      loseLeadershipWhenHanging: true,
    });
    await old.line(/^LEADER /, TAKEOVER_DEADLINE);
    const next = harness().spawn('calendar', namespace, { ...overlap, name: 'next' });
    await next.line(/^READY$/);
    const hanging = await old.line(/^HANGING /, 60_000);
    const hungId = field(hanging, 1);
    await old.line(new RegExp(`^RECORD cancelled/leadership_lost ${hungId} `), TAKEOVER_DEADLINE);
    await next.line(/^LEADER /, TAKEOVER_DEADLINE);
    const busy = await next.line(/^RECORD skipped\/overlap_busy /, TAKEOVER_DEADLINE);
    const released = await old.line(/^RELEASED /, 60_000);
    // The new leader found the schedule busy before the old handler ended…
    expect(Number(field(busy, 4))).toBeLessThan(Number(field(released, 1)));
    // …and runs it again once the old handler let go of the overlap lease.
    await next.line(/^RECORD succeeded /, TAKEOVER_DEADLINE);
    expect(await next.stop()).toBe(0);
    expect(await old.stop()).toBe(0);
    const runs = await loadRuns(store);
    const ids = runs.map((r) => r.occurrence);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).not.toContain(hungId);
  }, 120_000);
}
