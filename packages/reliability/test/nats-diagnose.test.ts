import { freshNamespace } from '@duetime/conformance';
import { describe, expect, it } from 'vitest';
import { describeNatsKeys } from '../src/nats-diagnose.js';
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
    } finally {
      await backend.close();
      await dropTarget(target);
    }
  });
});
