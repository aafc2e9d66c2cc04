import { describe, expect, it } from 'vitest';
import {
  type DstPolicy,
  describeStoredRecurrence,
  interval,
  parseCron,
  recurring,
  type StoredRecurrence,
  upcomingOccurrences,
} from '../../src/index.js';
import { storeRecurrence } from '../../src/store/recurrence.js';

function stored(spec: Parameters<typeof recurring>[0], options: Parameters<typeof recurring>[1] = {}) {
  return storeRecurrence(recurring(spec, options), Date.parse('2030-01-01T00:00:00Z'));
}

describe('upcoming occurrences of a stored recurrence (what tools show)', () => {
  it('lists the pending occurrence and the next ones on the zone’s wall clock, across a DST change', () => {
    const { at, stored: r } = stored(parseCron('0 9 * * MON', 'America/New_York'), {
      startAt: new Date('2030-03-01T00:00:00Z'),
    });
    expect(upcomingOccurrences(r, at, 3).map((d) => d.toISOString())).toEqual([
      '2030-03-04T14:00:00.000Z',
      '2030-03-11T13:00:00.000Z',
      '2030-03-18T13:00:00.000Z',
    ]);
    expect(upcomingOccurrences(r, at, 0)).toEqual([]);
  });

  it('stops where the recurrence ends: maxOccurrences (counting runs so far) and endAt', () => {
    const { at, stored: r } = stored(interval(60_000), { maxOccurrences: 4 });
    const afterTwo: StoredRecurrence = { ...r, count: 2 };
    expect(upcomingOccurrences(afterTwo, at, 10)).toHaveLength(2);
    const bounded = stored(interval(60_000), { endAt: new Date('2030-01-01T00:02:30Z') });
    expect(upcomingOccurrences(bounded.stored, bounded.at, 10).map((d) => d.toISOString())).toEqual([
      '2030-01-01T00:00:00.000Z',
      '2030-01-01T00:01:00.000Z',
      '2030-01-01T00:02:00.000Z',
    ]);
  });

  it('describes a recurrence in one line, naming a DST policy only when it is not the default', () => {
    const shift: DstPolicy = { gap: 'shift', overlap: 'first' };
    expect(describeStoredRecurrence(stored(parseCron('30 2 * * *', 'Europe/Berlin')).stored)).toBe(
      'cron 30 2 * * * Europe/Berlin',
    );
    expect(
      describeStoredRecurrence(stored(parseCron('30 2 * * *', 'Europe/Berlin', { dst: shift })).stored),
    ).toBe('cron 30 2 * * * Europe/Berlin (dst shift,first)');
    expect(describeStoredRecurrence(stored(interval(60_000)).stored)).toMatch(/^every 60000 ms from /);
  });
});
