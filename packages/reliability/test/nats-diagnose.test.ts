import { freshNamespace } from '@duetime/conformance';
import { describe, expect, it } from 'vitest';
import type { AuditFigures } from '../src/audit.js';
import { describeNatsKeys, describeTrouble } from '../src/nats-diagnose.js';
import { assertServiceUp, dropTarget, newTarget, openTarget } from '../src/targets.js';

/** What an outage run prints about a lost schedule on NATS: the key's record as the stream holds it. */
describe('describeNatsKeys', () => {
  it('prints the record of a pending key and says which keys hold nothing', async () => {
    await assertServiceUp('nats');
    const target = newTarget('nats', freshNamespace());
    if (target.kind !== 'nats') throw new Error('not a NATS target');
    const backend = await openTarget(target);
    try {
      await backend.store.transact(async (tx) => {
        await tx.schedule('k/g1/7', new Date(Date.now() + 3_600_000), {
          type: 't',
          aggregateId: 'a',
          data: {},
        });
      });
      const lines = await describeNatsKeys(target.url, target.prefix, ['k/g1/7', 'k/g1/8']);
      expect(lines[0]).toMatch(/^fires consumer: /);
      // With the record's body: its attempts, its timer's id and its due time.
      expect(lines.find((l) => l.startsWith('k/g1/7 s:'))).toMatch(
        /^k\/g1\/7 s: seq \d+ at \S+ .*\{.*"n":0.*"t":"[^"]+"/,
      );
      expect(lines.find((l) => l.startsWith('k/g1/7 t:'))).toMatch(/Nats-Schedule: @at /);
      expect(lines.find((l) => l.startsWith('k/g1/8 s:'))).toMatch(/^k\/g1\/8 s: none \(/);
      // What a failing run prints: the keys its audit found stranded, and nothing for a clean audit.
      const figures = {
        lost: 0,
        stuck: 1,
        lostPuts: [],
        problems: ['k/g1/7: due 2026-12-06T16:23:25.352Z and still pending (version 3)'],
      } as unknown as AuditFigures;
      const trouble = await describeTrouble(target, figures);
      expect(trouble.filter((l) => l.startsWith('k/g1/7 ')).map((l) => l.slice(0, 9))).toEqual([
        'k/g1/7 s:',
        'k/g1/7 t:',
        'k/g1/7 f:',
      ]);
      expect(await describeTrouble(target, { ...figures, stuck: 0, problems: [] })).toEqual([]);
    } finally {
      await backend.close();
      await dropTarget(target);
    }
  });
});
