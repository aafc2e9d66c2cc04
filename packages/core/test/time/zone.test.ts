import fc from 'fast-check';
import { DateTime, IANAZone } from 'luxon';
import { describe, expect, it } from 'vitest';
import { type OffsetSegment, wallClock, zoneOffsets } from '../../src/index.js';

const ZONES = [
  'UTC',
  'America/New_York',
  'Europe/London',
  'Europe/Berlin',
  'Australia/Lord_Howe',
  'America/Santiago',
  'America/Havana',
  'Pacific/Chatham',
  'Asia/Kolkata',
  'Africa/Casablanca',
  'Pacific/Apia',
  'Pacific/Kiritimati',
  'America/St_Johns',
];

const luxonOffsetMs = (zone: string, t: number) => Math.round(IANAZone.create(zone).offset(t) * 60) * 1000;

describe('zone offset tables', () => {
  it('agree with luxon at random instants from 1900 to 2100', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...ZONES),
        fc.integer({ min: Date.UTC(1900, 0, 1), max: Date.UTC(2100, 0, 1) }),
        (zone, t) => {
          expect(zoneOffsets(zone).offsetAt(t), `${zone} ${new Date(t).toISOString()}`).toBe(
            luxonOffsetMs(zone, t),
          );
        },
      ),
      { numRuns: 400, seed: 51 },
    );
  });

  it('give segments whose edges are the exact transitions, with the offsets on both sides', () => {
    const seg: OffsetSegment = { start: 0, end: 0, offset: 0, offsetBefore: 0, offsetAfter: 0 };
    for (const zone of ZONES) {
      const offsets = zoneOffsets(zone);
      let t = Date.UTC(2018, 0, 1);
      let transitions = 0;
      while (t < Date.UTC(2027, 0, 1)) {
        offsets.segmentAt(t, seg);
        expect(seg.start).toBeLessThanOrEqual(t);
        expect(seg.end).toBeGreaterThan(t);
        expect(luxonOffsetMs(zone, seg.start)).toBe(seg.offset);
        expect(luxonOffsetMs(zone, seg.end - 1000)).toBe(seg.offset);
        expect(luxonOffsetMs(zone, seg.start - 1000)).toBe(seg.offsetBefore);
        expect(luxonOffsetMs(zone, seg.end)).toBe(seg.offsetAfter);
        if (seg.offsetAfter !== seg.offset) transitions++;
        t = seg.end;
      }
      if (zone === 'America/New_York') expect(transitions).toBe(18);
      if (zone === 'UTC') expect(transitions).toBe(0);
    }
  });

  it('see the day Samoa skipped (Pacific/Apia, 30 December 2011)', () => {
    const seg: OffsetSegment = { start: 0, end: 0, offset: 0, offsetBefore: 0, offsetAfter: 0 };
    zoneOffsets('Pacific/Apia').segmentAt(Date.UTC(2011, 11, 30, 12), seg);
    expect(new Date(seg.start).toISOString()).toBe('2011-12-30T10:00:00.000Z');
    expect((seg.offset - seg.offsetBefore) / 3_600_000).toBe(24);
  });

  it('wallClock reads the same fields as luxon', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...ZONES),
        fc.integer({ min: Date.UTC(1960, 0, 1), max: Date.UTC(2060, 0, 1) }),
        (zone, t) => {
          const ours = wallClock(new Date(t), zone);
          const theirs = DateTime.fromMillis(t, { zone });
          expect(ours).toEqual({
            year: theirs.year,
            month: theirs.month,
            day: theirs.day,
            hour: theirs.hour,
            minute: theirs.minute,
            second: theirs.second,
            millisecond: theirs.millisecond,
            weekday: theirs.weekday % 7,
            offsetMinutes: theirs.offset,
          });
        },
      ),
      { numRuns: 300, seed: 52 },
    );
  });
});
