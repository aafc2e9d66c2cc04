import { type DeadLetterReason, type JetStreamScheduler, Terminal } from '@duetime/backend-nats';

/** An invoice as the billing system knows it. */
export interface Invoice {
  id: string;
  customer: string;
  amount: number;
  paid: boolean;
}

/** What the reminder worker needs from the rest of the application. */
export interface ReminderDeps {
  scheduler: JetStreamScheduler;
  /** Looks an invoice up; undefined when it was deleted. */
  findInvoice(id: string): Invoice | undefined;
  /** Sends a reminder e-mail; may fail (the message is then retried). */
  sendReminder(invoice: Invoice, idempotencyKey: string): Promise<void>;
  /** Where reminders that will never be sent end up, for a person to look at. */
  park(entry: ParkedReminder): void;
  log(line: string): void;
}

/** A reminder that was dead-lettered. */
export interface ParkedReminder {
  key: string;
  reason: DeadLetterReason;
  deliveries: number;
  error: string;
}

const DURABLE = 'invoice-reminders';

/** The key an invoice's reminders fire on. */
export function reminderKey(invoiceId: string): string {
  return `invoice/${invoiceId}/remind`;
}

/**
 * Schedules a reminder for an invoice `delayMs` from now. `atId` with the invoice id makes a retried
 * request (a double click, a redelivered command) schedule it only once.
 */
export async function scheduleReminder(scheduler: JetStreamScheduler, invoice: Invoice, delayMs: number) {
  return scheduler.atId(reminderKey(invoice.id), `first-${invoice.id}`, new Date(Date.now() + delayMs), {
    invoiceId: invoice.id,
  });
}

/** A cron sweep every 2 seconds that checks for anything overdue (a heartbeat in this example). */
export async function scheduleSweep(scheduler: JetStreamScheduler) {
  return scheduler.cron('overdue-sweep', 'sweeps/overdue', '*/2 * * * * *', { sweep: 'overdue' });
}

/**
 * Runs the reminder worker: sends reminders for unpaid invoices, skips paid ones, dead-letters reminders
 * for deleted invoices at once (a terminal error) and those whose sending keeps failing after 3 tries.
 */
export async function startReminderWorker(deps: ReminderDeps) {
  const { scheduler, log } = deps;
  return scheduler.consumeFired(
    DURABLE,
    3,
    (key, reason, deliveries, info) => {
      const error = info.error instanceof Error ? info.error.message : String(info.error);
      deps.park({ key, reason, deliveries, error });
      log(`${key}: dead-lettered (${reason} after ${deliveries} deliveries: ${error})`);
    },
    async (key, payload, firedId, info) => {
      if (key === 'sweeps/overdue') {
        log(`sweep tick ${info.due?.toISOString().slice(11, 19)}`);
        return;
      }
      const { invoiceId } = payload as { invoiceId: string };
      const invoice = deps.findInvoice(invoiceId);
      if (!invoice) throw Terminal(`invoice ${invoiceId} no longer exists`);
      if (invoice.paid) {
        log(`${key}: invoice already paid, no reminder`);
        return;
      }
      await deps.sendReminder(invoice, firedId);
      log(`${key}: reminder sent (delivery ${info.deliveries})`);
    },
    { retryDelay: 200 },
  );
}
