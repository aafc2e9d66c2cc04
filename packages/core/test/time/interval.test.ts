import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatDuration, interval, intervalFrom } from '../../src/index.js';

const iso = (d: Date | undefined) => d?.toISOString();

describe('interval', () => {
  it('fires on a grid aligned to the epoch, strictly after and strictly before', () => {
    const spec = interval(60_000);
    expect(iso(spec.next(new Date('2026-03-08T06:59:30Z')))).toBe('2026-03-08T07:00:00.000Z');
    expect(iso(spec.next(new Date('2026-03-08T07:00:00Z')))).toBe('2026-03-08T07:01:00.000Z');
    expect(iso(spec.prev(new Date('2026-03-08T07:00:00Z')))).toBe('2026-03-08T06:59:00.000Z');
    expect(iso(spec.prev(new Date('2026-03-08T07:00:00.001Z')))).toBe('2026-03-08T07:00:00.000Z');
    expect(spec.timeZone).toBe('UTC');
    expect(spec.toString()).toBe('every 1m');
  });

  it('measures elapsed time and ignores DST', () => {
    const spec = interval(3_600_000);
    const across = [...spec.occurrences(new Date('2026-03-08T05:30:00Z'), new Date('2026-03-08T09:00:00Z'))];
    expect(across.map((d) => d.toISOString())).toEqual([
      '2026-03-08T06:00:00.000Z',
      '2026-03-08T07:00:00.000Z',
      '2026-03-08T08:00:00.000Z',
    ]);
  });

  it('intervalFrom sets the phase of the grid, before and after the anchor alike', () => {
    const spec = intervalFrom(3_600_000, new Date('2026-01-01T00:15:00Z'));
    expect(iso(spec.next(new Date('2026-05-05T10:20:00Z')))).toBe('2026-05-05T11:15:00.000Z');
    expect(iso(spec.next(new Date('2025-05-05T10:10:00Z')))).toBe('2025-05-05T10:15:00.000Z');
    expect(iso(spec.prev(new Date('2026-01-01T00:15:00Z')))).toBe('2025-12-31T23:15:00.000Z');
    expect(spec.toString()).toBe('every 1h from 2026-01-01T00:15:00.000Z');
    expect(JSON.parse(JSON.stringify(spec))).toEqual({
      kind: 'interval',
      expression: 'every 1h from 2026-01-01T00:15:00.000Z',
      timeZone: 'UTC',
      everyMs: 3_600_000,
      anchor: '2026-01-01T00:15:00.000Z',
    });
    expect(Object.isFrozen(spec)).toBe(true);
  });

  it('next and prev agree with the grid for any interval, anchor and start (before 1970 too)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10 * 86_400_000 }),
        fc.integer({ min: -4e12, max: 4e12 }),
        fc.integer({ min: -4e12, max: 4e12 }),
        (every, anchor, start) => {
          const spec = intervalFrom(every, new Date(anchor));
          const n = (spec.next(new Date(start)) as Date).getTime();
          const p = (spec.prev(new Date(start)) as Date).getTime();
          expect(Math.abs((n - anchor) % every)).toBe(0);
          expect(Math.abs((p - anchor) % every)).toBe(0);
          expect(n).toBeGreaterThan(start);
          expect(n - every).toBeLessThanOrEqual(start);
          expect(p).toBeLessThan(start);
          expect(p + every).toBeGreaterThanOrEqual(start);
        },
      ),
      { numRuns: 500, seed: 41 },
    );
  });

  it('stops at the end of the supported range', () => {
    expect(interval(86_400_000).next(new Date('9999-12-31T00:00:00Z'))).toBeUndefined();
    expect(interval(86_400_000).prev(new Date('0001-01-01T00:00:00Z'))).toBeUndefined();
  });

  it('formats durations compactly', () => {
    expect(formatDuration(90_000)).toBe('1m30s');
    expect(formatDuration(1500)).toBe('1s500ms');
    expect(formatDuration(86_400_000 + 3_600_000)).toBe('1d1h');
    expect(formatDuration(7)).toBe('7ms');
  });
});
