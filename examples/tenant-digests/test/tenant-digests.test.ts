import { describe, expect, it } from 'vitest';
import { main } from '../src/main.js';

describe('the tenant-digests demo (PostgreSQL)', () => {
  it('sends each tenant its Monday 09:00 digest on its own wall clock, across DST, moves, pauses, triggers and cancellations', async () => {
    const lines: string[] = [];
    const sent = await main({ print: (line) => lines.push(line) });
    const of = (tenant: string) =>
      sent.filter((s) => s.tenantId === tenant && s.kind === 'scheduled').map((s) => s.dueAt);
    // New York: 09:00 EST is 14:00Z until US DST starts on 2027-03-14, then 09:00 EDT is 13:00Z. Paused
    // from day 10 to day 17: the Monday in between (03-15) is skipped on resume.
    expect(of('acme')).toEqual([
      '2027-03-01T14:00:00.000Z',
      '2027-03-08T14:00:00.000Z',
      '2027-03-22T13:00:00.000Z',
    ]);
    expect(lines.some((l) => l.includes('digest resumed, 1 missed Monday(s) not sent'))).toBe(true);
    // The digest support sent by hand on day 17, beside the weekly ones.
    expect(sent.filter((s) => s.kind === 'triggered').map((s) => s.tenantId)).toEqual(['kaisha']);
    // Berlin (no DST change in March before the 28th) until the tenant leaves on day 10.
    expect(of('hallo')).toEqual(['2027-03-01T08:00:00.000Z', '2027-03-08T08:00:00.000Z']);
    // Tokyo, then Los Angeles (09:00 PDT = 16:00Z) after moving on day 10.
    expect(of('kaisha')).toEqual([
      '2027-03-01T00:00:00.000Z',
      '2027-03-08T00:00:00.000Z',
      '2027-03-15T16:00:00.000Z',
      '2027-03-22T16:00:00.000Z',
    ]);
    expect(sent.filter((s) => s.kind === 'scheduled').every((s) => /09:00/.test(s.localTime))).toBe(true);
    expect(lines.some((l) => l.includes('hallo left: its row and 1 schedule(s)'))).toBe(true);
  }, 60_000);
});
