import { afterEach, describe, expect, it } from 'vitest';
import { currentInvocation, every, type Invocation, Reason } from '../../src/index.js';
import { deferred, outcomes, records, World } from './helpers.js';

let world: World;
afterEach(async () => {
  await world?.stopAll();
});

const MINUTE = 60_000;

/**
 * An external system that fences its writers: it keeps the largest epoch it has seen and refuses a
 * write that carries a smaller one (as a database row `WHERE epoch <= $epoch`, a storage API with a
 * fencing token, or a ZooKeeper/etcd revision check would).
 */
class FencedLedger {
  highest = 0;
  readonly entries: { occurrence: string; epoch: number; writer: string }[] = [];
  readonly refused: { occurrence: string; epoch: number; writer: string }[] = [];

  write(invocation: Invocation, writer: string): void {
    const entry = { occurrence: invocation.occurrence, epoch: invocation.epoch as number, writer };
    if (typeof invocation.epoch !== 'number' || invocation.epoch < this.highest) {
      this.refused.push(entry);
      throw new Error(`stale leader: epoch ${invocation.epoch} < ${this.highest}`);
    }
    this.highest = invocation.epoch;
    this.entries.push(entry);
  }
}

describe('Scheduler: fencing tokens in the invocation', () => {
  it('gives handlers the epoch they were admitted under, the same as their records', async () => {
    world = new World();
    const seen: (number | undefined)[] = [];
    const a = world.replica([
      every('job', MINUTE, ({ invocation }) => {
        seen.push(invocation.epoch, currentInvocation()?.epoch);
      }),
    ]);
    await world.advance(30_000);
    const epoch = a.scheduler.snapshot().epoch;
    expect(typeof epoch).toBe('number');
    expect(seen).toEqual([epoch, epoch]);
    expect(records(a.scheduler, 'job')[0]?.epoch).toBe(epoch);
    // Manual runs are not admitted by a leader: no epoch, nothing to fence with.
    let manual: Invocation | undefined;
    const b = world.replica([
      every('job', MINUTE, ({ invocation }) => {
        manual = invocation;
      }),
    ]);
    await b.scheduler.runNow('job');
    expect(manual?.origin).toBe('manual');
    expect(manual && 'epoch' in manual).toBe(false);
  });

  it('lets an external system refuse the writes of a deposed leader after a failover', async () => {
    world = new World();
    const ledger = new FencedLedger();
    const gate = deferred();
    const outcomesByReplica: Record<string, string[]> = { a: [], b: [] };
    const handler =
      (replica: 'a' | 'b') =>
      async ({ invocation }: { invocation: Invocation }) => {
        // a's first run is slow and ignores its signal: it writes after it has lost leadership.
        if (replica === 'a') await gate.promise;
        try {
          ledger.write(invocation, replica);
          outcomesByReplica[replica]?.push(`wrote ${invocation.epoch}`);
        } catch (error) {
          outcomesByReplica[replica]?.push(`refused ${invocation.epoch}`);
          throw error;
        }
      };
    const a = world.replica([every('job', MINUTE, handler('a'))], { leadershipTTL: 3000 });
    await world.advance(30_000); // T0 starts on a and hangs
    const epochA = a.scheduler.snapshot().epoch as number;
    const b = world.replica([every('job', MINUTE, handler('b'))], { leadershipTTL: 3000 });
    a.leases.fail('renew');
    a.leases.fail('acquire');
    await world.advance(4000); // a's lease expired; b leads, with a larger token, and re-runs T0
    const epochB = b.scheduler.snapshot().epoch as number;
    expect(b.scheduler.snapshot().leader).toBe(true);
    expect(epochB).toBeGreaterThan(epochA);
    expect(outcomesByReplica.b).toEqual([`wrote ${epochB}`]);
    expect(outcomes(records(a.scheduler, 'job'))).toEqual(['cancelled/leadership_lost']);
    // a's handler finally goes on and writes with its old epoch: the ledger refuses it.
    gate.resolve();
    await world.advance(0);
    expect(outcomesByReplica.a).toEqual([`refused ${epochA}`]);
    expect(ledger.entries).toEqual([
      { occurrence: ledger.entries[0]?.occurrence, epoch: epochB, writer: 'b' },
    ]);
    expect(ledger.refused.map((r) => [r.writer, r.epoch])).toEqual([['a', epochA]]);
    // The same occurrence: b re-ran exactly what a was deposed in.
    expect(ledger.refused[0]?.occurrence).toBe(ledger.entries[0]?.occurrence);
    // a's record stays what it was when leadership was lost.
    expect(records(a.scheduler, 'job')[0]?.reason).toBe(Reason.LeadershipLost);
  });
});
