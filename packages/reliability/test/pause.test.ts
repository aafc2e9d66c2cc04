import { freshNamespace, waitFor } from '@duetime/conformance';
import { describe, expect, it } from 'vitest';
import { loadFenceLog } from '../src/fence.js';
import { selectedBackends } from '../src/mode.js';
import { spawnWorker, type Worker } from '../src/processes.js';
import { runSeed } from '../src/random.js';
import { recordResult } from '../src/results.js';
import { assertServiceUp, BACKENDS, dropTarget, newTarget, openTarget } from '../src/targets.js';

/** A worker line split into its words: `WORD <occurrence> <epoch> <ms>` (ABORTED has code and reason first). */
interface Said {
  word: string;
  occurrence: string;
  epoch: number;
  at: number;
  rest: string[];
}

function said(worker: Worker, word: string): Said[] {
  return worker.lines
    .filter((line) => line.startsWith(`${word} `))
    .map((line) => {
      const parts = line.split(' ');
      const at = Number(parts.at(-1));
      const epoch = Number(parts.at(-2));
      const occurrence = parts.at(-3) as string;
      return { word, occurrence, epoch, at, rest: parts.slice(1, -3) };
    });
}

function leaderEpochs(worker: Worker): { epoch: number; at: number }[] {
  return worker.lines
    .filter((line) => line.startsWith('LEADER '))
    .map((line) => {
      const [, epoch, at] = line.split(' ');
      return { epoch: Number(epoch), at: Number(at) };
    });
}

const TTL = 1500;

describe.each(selectedBackends(BACKENDS))('a leader paused past its lease on %s', (kind) => {
  it('does not act as leader after SIGCONT: a higher token took over, its handlers are aborted and fenced off, nothing runs twice', async () => {
    await assertServiceUp(kind);
    const seed = runSeed();
    console.log(
      `[pause ${kind}] seed ${seed} (the pause test's timing comes from the processes, not the seed)`,
    );
    const base = newTarget(kind, freshNamespace());
    // A leader frozen inside a transaction keeps its row locks on PostgreSQL (and the new leader's claim
    // waits for them): the server ends such a session after idleInTransactionTimeoutMs.
    const target = base.kind === 'postgres' ? { ...base, idleInTransactionTimeoutMs: 1000 } : base;
    const backend = await openTarget(target);
    const workers: Worker[] = [];
    try {
      const args = { target, period: 400, hold: 600, leadershipTTL: TTL };
      workers.push(await spawnWorker('fenced', { ...args, name: 'replica-a' }));
      await workers[0]?.line(/^LEADER /, 60_000);
      workers.push(await spawnWorker('fenced', { ...args, name: 'replica-b' }));
      await workers[1]?.line(/^READY$/, 60_000);
      // Pause the leader while it has runs in flight (each holds 600 ms, one starts every 400 ms). On
      // SQLite a process paused inside a transaction holds the database's write lock, and nobody can take
      // over (or write anything) until it resumes: then resume it and pause whoever leads again later.
      let paused!: Worker;
      let other!: Worker;
      let pausedAt = 0;
      let blockedPauses = 0;
      for (;;) {
        // A leader recording runs, with one in flight (started, not finished) to be caught by the pause.
        const leading = await waitFor('a leader that is recording runs, one in flight', () =>
          workers.find(
            (w) =>
              isLeader(w) &&
              said(w, 'RECORDED').some((s) => s.at > Date.now() - 2000) &&
              runningNow(w).length > 0,
          ),
        );
        paused = leading;
        other = workers.find((w) => w !== leading) as Worker;
        paused.child.kill('SIGSTOP');
        pausedAt = Date.now();
        const since = pausedAt;
        const tookOver = await waitFor(
          'the other replica to lead and claim its epoch',
          () => said(other, 'CLAIMED').some((s) => s.at >= since),
          { timeoutMs: kind === 'sqlite' ? 8 * TTL : 60_000 },
        ).then(
          () => true,
          (error: Error) => {
            if (kind !== 'sqlite' || blockedPauses >= 5) throw error;
            return false;
          },
        );
        if (tookOver) break;
        blockedPauses++;
        paused.child.kill('SIGCONT');
      }
      // Past the lease's time to live, whatever the timing of its last renewal.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, pausedAt + TTL + 300 - Date.now())));
      paused.child.kill('SIGCONT');
      const resumedAt = Date.now();
      // Runs started before the pause whose write did not go through. (A run may print RECORDED after
      // the resume for a write that committed just before the pause; whether any write of the old epoch
      // landed after the new one claimed the store is checked on the durable log below.)
      const inFlightAtPause = () => {
        const finished = new Set(
          [...said(paused, 'RECORDED'), ...said(paused, 'ALREADY')].map((s) => s.occurrence),
        );
        return said(paused, 'START')
          .filter((s) => s.at < pausedAt && !finished.has(s.occurrence))
          .map((s) => s.occurrence);
      };
      // Every run the paused leader had in flight ends fenced off and aborted (leadership lost).
      await waitFor(
        'the paused leader to notice it lost leadership',
        () => !isLeader(paused) && inFlightAtPause().every((occ) => aborted(paused, occ)),
        { timeoutMs: 60_000 },
      ).catch((error: Error) => {
        throw new Error(`${error.message}; its lines since the pause: ${linesSince(paused, pausedAt)}`);
      });
      const recordedByNew = () => new Set(said(other, 'RECORDED').map((s) => s.occurrence));
      await waitFor(
        'the new leader to run what the paused one had in flight, and more',
        () =>
          inFlightAtPause().every((occ) => recordedByNew().has(occ)) &&
          recordedByNew().size >= inFlightAtPause().length + 2,
        { timeoutMs: 60_000 },
      );
      for (const w of workers) expect(await w.stop(30_000)).toBe(0);

      const inFlight = inFlightAtPause();
      const oldEpoch = leaderEpochs(paused)
        .filter((l) => l.at < pausedAt)
        .at(-1)?.epoch as number;
      const newEpoch = leaderEpochs(other).find((l) => l.at >= pausedAt)?.epoch as number;
      const startsAfterResume = said(paused, 'START').filter((s) => s.at >= resumedAt);
      const fenced = said(paused, 'FENCED');
      // On PostgreSQL a run frozen inside its transaction has its session ended by the server (the
      // backend's idleInTransactionTimeoutMs): its write fails rather than being fenced off.
      const failed = said(paused, 'FAILED');
      const abortedRuns = said(paused, 'ABORTED');
      const log = await loadFenceLog(backend.store);
      const runs = log.filter((e) => e.type === 'ran');
      const counts = new Map<string, number>();
      for (const run of runs) counts.set(run.occurrence, (counts.get(run.occurrence) ?? 0) + 1);
      const twice = [...counts].filter(([, n]) => n > 1);
      // The new leader's claim comes first in the log; no run of an older epoch may follow it.
      const claimOfNew = log.findIndex((e) => e.type === 'claimed' && e.epoch === newEpoch);
      const staleAfterNew = log.slice(claimOfNew).filter((e) => e.type === 'ran' && e.epoch < newEpoch);
      console.log(
        `[pause ${kind}] paused ${resumedAt - pausedAt} ms (TTL ${TTL}); epochs ${oldEpoch} -> ${newEpoch}; ` +
          `in flight at the pause ${inFlight.length}, fenced ${fenced.length}, failed ${failed.length}, aborted ${abortedRuns.length}; ` +
          `starts after resume ${startsAfterResume.length}; runs recorded ${runs.length}, twice ${twice.length}; ` +
          `re-runs of recorded occurrences by the new leader ${said(other, 'ALREADY').length}; ` +
          `pauses that blocked everyone (SQLite write lock) ${blockedPauses}`,
      );
      recordResult('pause', kind, seed, {
        pausedMs: resumedAt - pausedAt,
        inFlight: inFlight.length,
        fenced: fenced.length,
        failed: failed.length,
        startsAfterResume: startsAfterResume.length,
        duplicated: twice.length,
        blockedPauses,
      });
      expect(resumedAt - pausedAt).toBeGreaterThan(TTL);
      expect(newEpoch).toBeGreaterThan(oldEpoch);
      expect(startsAfterResume, 'runs started by the paused leader after it resumed').toEqual([]);
      expect(inFlight.length).toBeGreaterThan(0);
      for (const occ of inFlight) {
        expect(
          [...fenced, ...failed].map((s) => s.occurrence),
          `run ${occ} of the paused leader was fenced off (or its frozen session ended)`,
        ).toContain(occ);
        const abort = abortedRuns.find((s) => s.occurrence === occ);
        expect(abort?.rest, `run ${occ} saw its signal aborted`).toEqual([
          'DUETIME_LEADERSHIP_LOST',
          'leadership_lost',
        ]);
        // The occurrence it was running is not lost: the new leader ran it, once.
        expect(counts.get(occ), `occurrence ${occ} recorded once`).toBe(1);
      }
      expect(twice).toEqual([]);
      expect(claimOfNew, 'the new leader claimed its epoch in the store').toBeGreaterThanOrEqual(0);
      expect(staleAfterNew, 'runs of the old epoch recorded after the new one claimed the store').toEqual([]);
    } catch (error) {
      for (const w of workers)
        console.log(
          `[pause ${kind}] ${w.role} ${w.pid} printed:\n${w.lines.slice(-80).join('\n')}\n${w.stderr()}`,
        );
      throw error;
    } finally {
      for (const w of workers) {
        w.child.kill('SIGCONT');
        await w.kill();
      }
      await backend.close();
      await dropTarget(target);
    }
  });
});

/** The worker's lines printed at or after `since` (for failure messages). */
function linesSince(worker: Worker, since: number): string {
  return worker.lines.filter((l) => Number(l.split(' ').at(-1)) >= since).join('; ');
}

/** Whether the worker's last leadership line says it leads. */
function isLeader(worker: Worker): boolean {
  const last = worker.lines.findLast((l) => l.startsWith('LEADER ') || l.startsWith('FOLLOWER '));
  return last?.startsWith('LEADER ') ?? false;
}

/** Occurrences the worker started and has not finished (no outcome line yet). */
function runningNow(worker: Worker): string[] {
  const finished = new Set(
    ['RECORDED', 'ALREADY', 'FENCED', 'FAILED', 'ABORTED'].flatMap((word) =>
      said(worker, word).map((s) => s.occurrence),
    ),
  );
  return said(worker, 'START')
    .map((s) => s.occurrence)
    .filter((occurrence) => !finished.has(occurrence));
}

function aborted(worker: Worker, occurrence: string): boolean {
  return worker.lines.some((l) => l.startsWith('ABORTED ') && l.includes(` ${occurrence} `));
}
