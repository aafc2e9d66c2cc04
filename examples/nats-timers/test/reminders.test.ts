import { JetStreamScheduler } from '@duetime/backend-nats';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type Invoice,
  type ParkedReminder,
  scheduleReminder,
  startReminderWorker,
} from '../src/reminders.js';

const url = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';

async function until(what: string, check: () => boolean, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('invoice reminders on the JetStream scheduler', () => {
  let scheduler: JetStreamScheduler | undefined;
  afterEach(async () => {
    await scheduler?.destroy();
  });

  it('sends, skips, retries and dead-letters reminders', async () => {
    scheduler = await JetStreamScheduler.connect(url, {
      prefix: `exampletest${process.pid}`,
      leaseTtl: 1_000,
    }).catch((error: Error) => {
      throw new Error(
        `${error.message}: start NATS with \`bash scripts/services.sh up\` or set DUETIME_NATS_URL`,
      );
    });
    const invoices = new Map<string, Invoice>([
      ['A', { id: 'A', customer: 'a@example.com', amount: 1, paid: false }],
      ['B', { id: 'B', customer: 'b@example.com', amount: 2, paid: true }],
      ['C', { id: 'C', customer: 'c@example.com', amount: 3, paid: false }],
      ['D', { id: 'D', customer: 'd@example.com', amount: 4, paid: false }],
    ]);
    const sent: Array<[string, string]> = [];
    const parked: ParkedReminder[] = [];
    let failures = 1;
    const worker = await startReminderWorker({
      scheduler,
      findInvoice: (id) => invoices.get(id),
      async sendReminder(invoice, key) {
        if (invoice.id === 'D') throw new Error('address rejected');
        if (invoice.id === 'C' && failures-- > 0) throw new Error('mail service down');
        sent.push([invoice.id, key]);
      },
      park: (entry) => parked.push(entry),
      log: () => {},
    });
    for (const invoice of invoices.values()) await scheduleReminder(scheduler, invoice, 100);
    expect((await scheduleReminder(scheduler, invoices.get('A') as Invoice, 100)).duplicate).toBe(true);
    invoices.delete('A');

    await until('C sent and A, D parked', () => sent.some(([id]) => id === 'C') && parked.length >= 2);
    await worker.stop();
    expect(sent.map(([id]) => id)).toEqual(['C']);
    expect(sent[0]?.[1]).toMatch(/^once:invoice\/C\/remind\.=first-C$/);
    expect(parked.map((p) => [p.key, p.reason, p.deliveries]).sort()).toEqual([
      ['invoice/A/remind', 'terminal', 1],
      ['invoice/D/remind', 'max_deliver', 3],
    ]);
  });
});
