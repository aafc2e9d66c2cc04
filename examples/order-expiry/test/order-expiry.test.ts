import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../src/main.js';

const dir = mkdtempSync(join(tmpdir(), 'order-expiry-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the order-expiry demo', () => {
  it('expires each unpaid order exactly once and leaves the paid ones paid', async () => {
    const lines: string[] = [];
    const outcome = await main({
      backendUrl: `sqlite:${join(dir, 'orders.db')}`,
      expiresAfter: 400,
      print: (line) => lines.push(line),
    });
    expect(outcome.pendingSchedules).toBe(0);
    for (const id of ['ORD-2', 'ORD-4', 'ORD-5']) {
      expect(outcome.orders[id]).toEqual({ status: 'paid', events: ['order.placed', 'order.paid'] });
    }
    for (const id of ['ORD-1', 'ORD-3', 'ORD-6']) {
      expect(outcome.orders[id]).toEqual({ status: 'expired', events: ['order.placed', 'order.expired'] });
    }
    // Checkout cancelled two checks; the bank-transferred order's check ran and found it paid.
    expect(Object.keys(outcome.checks).sort()).toEqual(['ORD-1', 'ORD-3', 'ORD-4', 'ORD-6']);
    expect(lines.some((l) => l.includes('ORD-4 expiry check: already paid, nothing to do'))).toBe(true);
    expect(lines.filter((l) => l.includes('-> order.expired'))).toHaveLength(3);
    // ORD-7's provider never answers: three attempts, then a dead letter kept in the store.
    expect(outcome.orders['ORD-7']).toEqual({ status: 'pending', events: ['order.placed'] });
    expect(
      lines.filter((l) => l.includes('[warn] processor failed; will retry (order/ORD-7/expire')),
    ).toHaveLength(2);
    expect(outcome.deadLetters).toHaveLength(1);
    expect(outcome.deadLetters[0]).toMatchObject({
      key: 'order/ORD-7/expire',
      attempts: 3,
      error: 'Error: legacy-bank did not answer (void authorisation)',
      message: { type: 'order.expire', data: { orderId: 'ORD-7' } },
    });
  }, 30_000);

  it('starts from a fresh file on every run', async () => {
    const url = `sqlite:${join(dir, 'again.db')}`;
    await main({ backendUrl: url, expiresAfter: 200, print: () => {} });
    const second = await main({ backendUrl: url, expiresAfter: 200, print: () => {} });
    expect(second.orders['ORD-1']?.events).toEqual(['order.placed', 'order.expired']);
  }, 30_000);

  it('names the variable and the value for a backend it cannot open yet', async () => {
    await expect(main({ backendUrl: 'redis://localhost:6379', print: () => {} })).rejects.toMatchObject({
      code: 'DUETIME_INVALID_ARGUMENT',
      field: 'DUETIME_BACKEND',
      value: 'redis://localhost:6379',
    });
  });
});
