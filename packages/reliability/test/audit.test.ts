import type { Schedule } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { type AuditInput, audit } from '../src/audit.js';
import { History, type Op } from '../src/driver.js';
import type { Delivery } from '../src/effects.js';

/** The audit's own rules, on hand-made histories: it must catch every way of getting it wrong. */
const NOW = 1_000_000;

function input(ops: Op[], delivered: Record<string, string[]>, pending: Schedule[] = []): AuditInput {
  const history = new History();
  for (const op of ops) history.add(op);
  const deliveries = new Map<string, Delivery[]>();
  for (const [key, puts] of Object.entries(delivered))
    deliveries.set(
      key,
      puts.map((put) => ({ put, key, version: 1, pid: 1 })),
    );
  return { history, deliveries, pending: new Map(pending.map((s) => [s.key, s])), drainedAt: NOW };
}

const put = (key: string, p: string, outcome: Op['outcome'] = 'committed', at = NOW - 10): Op => ({
  kind: 'put',
  key,
  put: p,
  at,
  outcome,
});
const cancel = (key: string, outcome: Op['outcome'] = 'committed'): Op => ({ kind: 'cancel', key, outcome });

function pendingPut(key: string, p: string, at: number): Schedule {
  const when = new Date(at);
  return {
    key,
    at: when,
    dueAt: when,
    version: 9,
    attempts: 0,
    message: { type: 't', aggregateId: key, data: { put: p } },
  };
}

describe('audit', () => {
  it('passes a clean history: final puts delivered once, superseded ones at most once', () => {
    const f = audit(
      input([put('a', 'p1'), put('a', 'p2'), put('b', 'p3'), cancel('b'), put('c', 'p4')], {
        a: ['p1', 'p2'],
        c: ['p4'],
      }),
    );
    expect([f.lost, f.duplicated, f.unexpected, f.stuck]).toEqual([0, 0, 0, 0]);
    expect(f.delivered).toBe(3);
    expect(f.deliveredBeforeSuperseded).toBe(1);
  });

  it('counts a final put never delivered as lost, and one delivered twice as duplicated', () => {
    const f = audit(input([put('a', 'p1'), put('b', 'p2')], { b: ['p2', 'p2'] }));
    expect(f.lost).toBe(1);
    expect(f.duplicated).toBe(1);
    expect(f.problems.join('\n')).toMatch(/a: final put p1/);
  });

  it('counts a delivery of something never scheduled on that key, or a far-future put delivered early, as unexpected', () => {
    const far = NOW + 86_400_000;
    const f = audit(
      input([put('a', 'p1'), put('b', 'p2', 'committed', far)], { a: ['p1', 'p9'], b: ['p2'] }, [
        pendingPut('b', 'p2', far),
      ]),
    );
    expect(f.unexpected).toBe(2);
  });

  it('requires a far-future final put to be pending, and counts due schedules left pending as stuck', () => {
    const far = NOW + 86_400_000;
    const lost = audit(input([put('a', 'p1', 'committed', far)], {}));
    expect(lost.lost).toBe(1);
    const kept = audit(input([put('a', 'p1', 'committed', far)], {}, [pendingPut('a', 'p1', far)]));
    expect(kept.lost).toBe(0);
    const stuck = audit(input([put('a', 'p1')], { a: ['p1'] }, [pendingPut('z', 'p0', NOW - 5)]));
    expect(stuck.stuck).toBe(1);
  });

  it('after an uncertain operation: any of the candidate puts may be the one delivered, but one of them must be', () => {
    const ok = audit(input([put('a', 'p1'), put('a', 'p2', 'uncertain')], { a: ['p1'] }));
    expect(ok.lost).toBe(0);
    expect(ok.uncertain).toBe(1);
    const none = audit(input([put('a', 'p1'), put('a', 'p2', 'uncertain')], {}));
    expect(none.lost).toBe(1);
    const maybeCancelled = audit(input([put('a', 'p1'), cancel('a', 'uncertain')], {}));
    expect(maybeCancelled.lost).toBe(0);
    // After a committed cancel, a put whose transaction threw may simply not have committed.
    const afterCancel = audit(input([put('a', 'p1'), cancel('a'), put('a', 'p2', 'uncertain')], {}));
    expect(afterCancel.lost).toBe(0);
    const nothingCommitted = audit(input([put('a', 'p1', 'uncertain')], {}));
    expect(nothingCommitted.lost).toBe(0);
  });

  it('finds gaps and repeats in calendar ticks, and tells reported failures from silent losses', () => {
    const tick = (at: number, n: number, marks = n) => ({
      at,
      occurrence: `o${at}`,
      deliveries: Array.from({ length: n }, () => ({
        occurrence: `o${at}`,
        key: `k${at}`,
        version: 1,
        pid: 1,
      })),
      marks,
    });
    const base = input([], {});
    const f = audit({
      ...base,
      ticks: {
        instants: [tick(1, 1), tick(2, 0, 0), tick(3, 2, 1), tick(4, 0, 0), tick(5, 1)],
        reported: new Set(['o4']),
      },
    });
    expect(f.ticks).toBe(5);
    expect(f.ticksLost).toBe(1);
    expect(f.ticksReported).toBe(1);
    expect(f.ticksDuplicated).toBe(1);
  });

  it('on SQL backends, finds rows and events that disagree (a delivery whose writes did not commit together)', () => {
    const base = input([put('a', 'p1'), put('b', 'p2')], { a: ['p1'], b: ['p2'] });
    expect(audit({ ...base, rows: ['fx/a p1', 'fx/b p2'] }).torn).toBe(0);
    expect(audit({ ...base, rows: ['fx/a p1'] }).torn).toBe(1);
    expect(audit({ ...base, rows: ['fx/a p1', 'fx/b p2', 'fx/b p2'] }).torn).toBe(1);
  });
});
