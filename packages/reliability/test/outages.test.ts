import { describe, expect, it } from 'vitest';
import type { AuditFigures } from '../src/audit.js';
import { saturateCpu } from '../src/cpu-hog.js';
import { SIZES, selectedBackends } from '../src/mode.js';
import { auditedOutageRun, dueIndexRepairs } from '../src/outage-audit.js';
import { runSeed } from '../src/random.js';
import { recordResult } from '../src/results.js';
import { assertServiceUp, BACKENDS } from '../src/targets.js';

describe.each(selectedBackends(BACKENDS))('outages on %s', (kind) => {
  it(`injects ${SIZES.outages} faults while work runs: nothing lost, nothing twice, every error typed`, async () => {
    await assertServiceUp(kind);
    const seed = runSeed();
    const label = `[outages ${kind}]`;
    console.log(`${label} seed ${seed} (replay: DUETIME_CHAOS_SEED=${seed} DUETIME_CHAOS_BACKENDS=${kind})`);
    const { run, figures } = await auditedOutageRun({
      kind,
      seed,
      outages: SIZES.outages,
      label,
      log: (line) => console.log(line),
    });
    recordResult('outages', kind, seed, {
      outages: run.total,
      schedules: figures.schedules,
      delivered: figures.delivered,
      uncertain: figures.uncertain,
      ticks: figures.ticks,
      ticksReportedFailed: figures.ticksReported,
      lost: figures.lost + figures.ticksLost,
      duplicated: figures.duplicated + figures.ticksDuplicated,
      stuck: figures.stuck,
      untypedErrors: run.errors.untypedCount,
    });
    const problems = figures.problems.join('\n');
    expect(run.total).toBe(SIZES.outages);
    expect(run.errors.untyped, 'errors that are not DuetimeErrors').toEqual([]);
    expect(figures.lost, problems).toBe(0);
    expect(figures.duplicated, problems).toBe(0);
    expect(figures.stuck, problems).toBe(0);
    expect(figures.unexpected, problems).toBe(0);
    expect(figures.torn, problems).toBe(0);
    expect(figures.ticksLost, problems).toBe(0);
    expect(figures.ticksDuplicated, problems).toBe(0);
    // Work went on through the faults: schedules delivered and calendar ticks enqueued and delivered.
    expect(figures.delivered).toBeGreaterThan(0);
    expect(figures.ticks).toBeGreaterThan(10);
  });
});

/** What an outage-loop run found wrong, by kind (all zero when the run is clean). */
function faultsOf(figures: AuditFigures, untyped: number) {
  return {
    lost: figures.lost + figures.ticksLost,
    duplicated: figures.duplicated + figures.ticksDuplicated,
    stuck: figures.stuck,
    unexpected: figures.unexpected,
    torn: figures.torn,
    untyped,
  };
}

// The outage loop (full mode only): timing decides whether an outage meets a commit, a claim or a purge
// at a bad moment, so one run proves little; many runs, half on a saturated CPU, make the rare
// interleavings come.
if (SIZES.outageLoop > 0 && selectedBackends(BACKENDS).includes('nats'))
  describe('outage loop on nats', () => {
    const runs = SIZES.outageLoop;
    it(
      `${runs} outage runs of ${SIZES.outageLoopFaults} faults, half with the CPU saturated: nothing lost, twice or stuck`,
      async () => {
        await assertServiceUp('nats');
        const first = runSeed();
        const totals = { lost: 0, duplicated: 0, stuck: 0, unexpected: 0, torn: 0, untyped: 0 };
        const failed: string[] = [];
        let schedules = 0;
        let delivered = 0;
        let ticks = 0;
        let repairs = 0;
        for (let i = 0; i < runs; i++) {
          const seed = (first + i) % 0x100000000;
          const hogged = i % 2 === 1;
          const label = `[outage loop nats ${i + 1}/${runs}${hogged ? ' cpu saturated' : ''}]`;
          console.log(
            `${label} seed ${seed} (replay: DUETIME_CHAOS_SEED=${seed} DUETIME_CHAOS_BACKENDS=nats DUETIME_CHAOS_OUTAGES=${SIZES.outageLoopFaults})`,
          );
          const stopHog = hogged ? saturateCpu() : undefined;
          let found: ReturnType<typeof faultsOf>;
          try {
            const { run, figures } = await auditedOutageRun({
              kind: 'nats',
              seed,
              outages: SIZES.outageLoopFaults,
              label,
              log: (line) => console.log(line),
            });
            found = faultsOf(figures, run.errors.untypedCount);
            schedules += figures.schedules;
            delivered += figures.delivered;
            ticks += figures.ticks;
            repairs += dueIndexRepairs(run);
            if (Object.values(found).some((n) => n > 0)) {
              failed.push(`${label} seed ${seed}: ${JSON.stringify(found)}\n${figures.problems.join('\n')}`);
              // Printed now too: a loop stopped early still shows what its failing runs found.
              console.log(`${label} FAILED ${failed.at(-1)}`);
            }
          } catch (error) {
            // A run that could not finish counts against the loop too; the others still run.
            found = { lost: 0, duplicated: 0, stuck: 0, unexpected: 0, torn: 0, untyped: 0 };
            failed.push(`${label} seed ${seed}: the run failed: ${String(error)}`);
          } finally {
            await stopHog?.();
          }
          for (const k of Object.keys(totals) as (keyof typeof totals)[]) totals[k] += found[k];
        }
        console.log(
          `[outage loop nats] ${runs} runs (${Math.floor(runs / 2)} with the CPU saturated): schedules ${schedules}, delivered ${delivered}, ticks ${ticks}, ${Object.entries(
            totals,
          )
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')}, due-index repairs ${repairs}, runs failing ${failed.length}`,
        );
        recordResult('outage-loop', 'nats', first, {
          runs,
          hogged: Math.floor(runs / 2),
          schedules,
          delivered,
          ticks,
          ...totals,
          dueIndexRepairs: repairs,
          failingRuns: failed.length,
        });
        expect(failed, failed.join('\n\n')).toEqual([]);
      },
      runs * 600_000,
    );
  });
