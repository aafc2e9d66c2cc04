import { afterEach, describe, expect, it } from 'vitest';
import { every } from '../../src/index.js';
import { outcomes, records, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

const MINUTE = 60_000;
const overlapKey = (id: string) => `duetime/calendar/production/default/overlap/${id}`;

describe('Scheduler: the guards before a run release what they took', () => {
  it('frees the one slot after every refusal, so the run behind them still gets it, minute after minute', async () => {
    world = new World();
    await world.backend.leases.acquire(overlapKey('busy'), 'someone-else', 10 * MINUTE);
    let ok = 0;
    const a = world.replica(
      [
        every('busy', MINUTE, () => {}).with({ withoutOverlap: true }),
        every('asks', MINUTE, () => {}).with({ withoutOverlap: true }),
        every('filtered', MINUTE, () => {}).with({ when: () => false }),
        every('throws', MINUTE, () => {}).with({
          when: () => {
            throw new Error('predicate bug');
          },
        }),
        every('ok', MINUTE, () => void ok++).with({ withoutOverlap: true }),
      ],
      { concurrency: 1, capacityWait: 1000 },
    );
    a.leases.fail('acquire', overlapKey('asks'));
    await world.advance(30_000);
    await world.advance(MINUTE);
    for (const [id, outcome] of [
      ['busy', 'skipped/overlap_busy'],
      ['asks', 'skipped/coordination_failed'],
      ['filtered', 'skipped/filtered'],
      ['throws', 'failed/hook_failed'],
      ['ok', 'succeeded'],
    ])
      expect(outcomes(records(a.scheduler, id)), id).toEqual([outcome, outcome]);
    expect(ok).toBe(2);
    expect(a.scheduler.snapshot()).toMatchObject({ running: 0, waiting: 0 });
    // The overlap lease of `ok` was released after each run; the one held elsewhere was never touched.
    expect(await world.backend.leases.holder(overlapKey('ok'))).toBeUndefined();
    expect((await world.backend.leases.holder(overlapKey('busy')))?.owner).toBe('someone-else');
  });

  it('releases the overlap lease and the slot of a run cancelled between taking them and starting', async () => {
    world = new World();
    let started = 0;
    const a = world.replica([every('job', MINUTE, () => void started++).with({ withoutOverlap: true })], {
      concurrency: 1,
    });
    a.leases.hold('acquire', overlapKey('job'));
    await world.advance(30_000); // T0: the slot is taken, the overlap lease granted but its reply held back
    expect(a.scheduler.snapshot().running).toBe(1);
    const stopping = a.scheduler.stop(); // admissions end before the reply arrives
    a.leases.flush();
    await world.advance(0);
    await stopping;
    expect(started).toBe(0);
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['cancelled/stopped']);
    expect(a.scheduler.snapshot().running).toBe(0);
    expect(await world.backend.leases.holder(overlapKey('job'))).toBeUndefined();
  });
});
