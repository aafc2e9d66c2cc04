import { expect, it } from 'vitest';
import { parseCron } from '../../src/index.js';

it('matches the seed vectors (America/New_York)', () => {
  const s = parseCron('30 2 * * *', 'America/New_York');
  expect(s.next(new Date('2026-03-08T06:59:00Z'))?.toISOString()).toBe('2026-03-09T06:30:00.000Z');
  const o = parseCron('30 1 * * *', 'America/New_York');
  expect(o.next(new Date('2026-11-01T05:00:00Z'))?.toISOString()).toBe('2026-11-01T05:30:00.000Z');
  expect(o.next(new Date('2026-11-01T05:30:00Z'))?.toISOString()).toBe('2026-11-01T06:30:00.000Z');
  expect(
    parseCron('0 0 29 FEB *', 'America/New_York').next(new Date('2026-01-01T00:00:00Z'))?.toISOString(),
  ).toBe('2028-02-29T05:00:00.000Z');
  expect(o.prev(new Date('2026-11-01T06:30:00Z'))?.toISOString()).toBe('2026-11-01T05:30:00.000Z');
  const sh = parseCron('30 2 * * *', 'America/New_York', { dst: { gap: 'shift', overlap: 'first' } });
  expect(sh.next(new Date('2026-03-08T06:59:00Z'))?.toISOString()).toBe('2026-03-08T07:00:00.000Z');
  expect(sh.prev(new Date('2026-03-08T07:00:01Z'))?.toISOString()).toBe('2026-03-08T07:00:00.000Z');
});
