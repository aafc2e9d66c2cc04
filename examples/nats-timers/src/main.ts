/**
 * Invoice reminders on the JetStream scheduler. Runs against NATS at DUETIME_NATS_URL (default
 * nats://127.0.0.1:4222): natively on a server >= 2.12, through the library's pump on older ones.
 */
import { JetStreamScheduler } from '@duetime/backend-nats';
import {
  type Invoice,
  type ParkedReminder,
  scheduleReminder,
  scheduleSweep,
  startReminderWorker,
} from './reminders.js';

const url = process.env.DUETIME_NATS_URL ?? 'nats://127.0.0.1:4222';
const started = Date.now();
const log = (line: string) => console.log(`+${((Date.now() - started) / 1000).toFixed(3)}s  ${line}`);

const invoices = new Map<string, Invoice>(
  [
    { id: 'INV-1', customer: 'ada@example.com', amount: 120, paid: false },
    { id: 'INV-2', customer: 'bob@example.com', amount: 80, paid: false },
    { id: 'INV-3', customer: 'cy@example.com', amount: 45, paid: false },
    { id: 'INV-4', customer: 'dee@example.com', amount: 300, paid: false },
  ].map((invoice) => [invoice.id, invoice]),
);
const parked: ParkedReminder[] = [];
let mailOutage = 1; // the mail service fails once, then recovers
const sent: string[] = [];

// fireAheadMs: a native server fires each reminder half a second early and consumeFired holds it until
// due, so reminders run on time rather than on the server's 250 ms grid (ignored by the emulated pump).
const scheduler = await JetStreamScheduler.connect(url, {
  prefix: `example${process.pid}`,
  fireAheadMs: 500,
});
const info = await scheduler.ensureStream();
log(
  `NATS ${info.serverVersion}: schedules run ${info.mode === 'native' ? 'in the server (native)' : 'in the library pump (emulated)'}`,
);

const worker = await startReminderWorker({
  scheduler,
  findInvoice: (id) => invoices.get(id),
  async sendReminder(invoice) {
    if (invoice.id === 'INV-4') throw new Error('mailbox rejected the address');
    if (invoice.id === 'INV-3' && mailOutage-- > 0) throw new Error('mail service unavailable');
    sent.push(invoice.id);
  },
  park: (entry) => parked.push(entry),
  log,
});

for (const [i, invoice] of [...invoices.values()].entries()) {
  const timer = await scheduleReminder(scheduler, invoice, 500 + i * 250);
  log(`${invoice.id}: reminder due at +${((timer.due.getTime() - started) / 1000).toFixed(3)}s`);
}
const again = await scheduleReminder(scheduler, invoices.get('INV-1') as Invoice, 500);
log(`INV-1: scheduled again by a retried request -> duplicate: ${again.duplicate}`);
await scheduleSweep(scheduler);
invoices.get('INV-2')!.paid = true;
log('INV-2: paid');
invoices.delete('INV-1');
log('INV-1: deleted');

const deadline = Date.now() + 10_000;
while ((sent.length < 1 || parked.length < 2) && Date.now() < deadline)
  await new Promise((r) => setTimeout(r, 50));
await new Promise((r) => setTimeout(r, 2_100)); // let a sweep tick or two through

await worker.stop();
console.log(`\nsent: ${sent.join(', ') || '-'}`);
console.log(`parked: ${parked.map((p) => `${p.key} (${p.reason})`).join(', ') || '-'}`);
await scheduler.destroy();
