/**
 * Order expiry, end to end: each order schedules its own expiry check in the transaction that places it;
 * a dispatcher delivers the checks when they fall due and expires the orders nobody paid.
 *
 *   pnpm --filter @duetime/example-order-expiry start
 *   DUETIME_BACKEND=sqlite:/tmp/orders.db pnpm --filter @duetime/example-order-expiry start
 */
import { pathToFileURL } from 'node:url';
import { type Backend, type DeadLetterRecord, Dispatcher, type Logger } from '@duetime/core';
import { DEFAULT_BACKEND_URL, openBackend } from './backend.js';
import {
  expiryHandlers,
  type OrderMessages,
  type OrderStatus,
  order,
  payAtCheckout,
  payByBankTransfer,
  placeOrder,
} from './orders.js';

export interface DemoOptions {
  /** Where the data lives (default: `DUETIME_BACKEND`, else `sqlite:./order-expiry.db`, recreated). */
  backendUrl?: string;
  /** How long an order may stay unpaid, in ms (default 1,500). */
  expiresAfter?: number;
  /** Where the timeline goes (default: the console). */
  print?: (line: string) => void;
}

export interface DemoOutcome {
  /** Every order's final status and the events in its stream. */
  orders: Record<string, { status: OrderStatus; events: string[] }>;
  /** How many expiry checks the dispatcher ran, per order. */
  checks: Record<string, number>;
  /** Schedules left when the demo ended (none when every check ran). */
  pendingSchedules: number;
  /** Checks the dispatcher gave up on, as kept in the store. */
  deadLetters: DeadLetterRecord[];
}

const ORDERS = [
  { id: 'ORD-1', amount: 25, pays: undefined },
  { id: 'ORD-2', amount: 40, pays: 'checkout' },
  { id: 'ORD-3', amount: 15, pays: undefined },
  { id: 'ORD-4', amount: 90, pays: 'bank transfer' },
  { id: 'ORD-5', amount: 60, pays: 'checkout' },
  { id: 'ORD-6', amount: 35, pays: undefined },
  { id: 'ORD-7', amount: 70, pays: undefined, provider: 'legacy-bank' },
] as const;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs the demo; resolves when every expiry check has run. */
export async function main(options: DemoOptions = {}): Promise<DemoOutcome> {
  const url = options.backendUrl ?? process.env.DUETIME_BACKEND ?? DEFAULT_BACKEND_URL;
  const expiresAfter = options.expiresAfter ?? 1500;
  const print = options.print ?? ((line: string) => console.log(line));
  const started = Date.now();
  const log = (line: string) => print(`+${((Date.now() - started) / 1000).toFixed(3)}s  ${line}`);

  const backend: Backend = await openBackend(url, { fresh: true });
  log(`opened ${url}`);
  const checks: Record<string, number> = {};
  // Failures are logged at warn and errors at error; here into the timeline, by default on the console.
  const logger: Logger = {
    debug() {},
    info() {},
    warn: (m, f) => log(`[warn] ${m} (${f?.key}, attempt ${f?.attempt}: ${(f?.error as Error)?.message})`),
    error: (m, f) => log(`[error] ${m} (${f?.key} after ${f?.attempts} attempts)`),
  };
  const dispatcher = new Dispatcher<OrderMessages>({
    store: backend.store,
    logger,
    // A demo's pace: three attempts, 200 ms apart (the defaults: 20 attempts, 1 s doubling up to an hour).
    maxAttempts: 3,
    retryDelay: 200,
    handlers: expiryHandlers((orderId, outcome) => {
      checks[orderId] = (checks[orderId] ?? 0) + 1;
      log(
        outcome === 'expired'
          ? `${orderId} expiry check: still pending -> order.expired`
          : `${orderId} expiry check: already ${outcome}, nothing to do`,
      );
    }),
  });
  const stop = new AbortController();
  const running = dispatcher.run(stop.signal);
  try {
    for (const [i, o] of ORDERS.entries()) {
      const expiresAt = new Date(Date.now() + expiresAfter + i * (expiresAfter / 10));
      await placeOrder(backend.store, o.id, o.amount, expiresAt, 'provider' in o ? o.provider : undefined);
      log(
        `${o.id} placed (${o.amount} EUR), expiry check due at +${((expiresAt.getTime() - started) / 1000).toFixed(3)}s`,
      );
    }
    await sleep(expiresAfter / 3);
    for (const o of ORDERS) {
      if (o.pays === 'checkout') {
        await payAtCheckout(backend.store, o.id);
        log(`${o.id} paid at checkout; its expiry check is cancelled in the same transaction`);
      } else if (o.pays === 'bank transfer') {
        await payByBankTransfer(backend.store, o.id);
        log(`${o.id} paid by bank transfer; its expiry check stays scheduled`);
      }
    }
    const deadline = Date.now() + expiresAfter * 4 + 5000;
    while ((await backend.store.listSchedules()).length > 0 && Date.now() < deadline) await sleep(25);
    stop.abort();
    await running;

    const outcome: DemoOutcome = {
      orders: {},
      checks,
      pendingSchedules: (await backend.store.listSchedules()).length,
      deadLetters: (await backend.store.pageDeadLetters()).items,
    };
    print('');
    print('order   amount  status   events');
    for (const o of ORDERS) {
      const events = await backend.store.loadEvents(o.id);
      const state = order.fold(events);
      outcome.orders[o.id] = { status: state.status, events: events.map((e) => e.type) };
      print(
        `${o.id}  ${String(state.amount).padStart(6)}  ${state.status.padEnd(7)}  ${events.map((e) => e.type).join(', ')}`,
      );
    }
    print('');
    print(
      `dead letters (duetime schedules list --dead --backend ${url}; retry with duetime schedules retry KEY --backend ${url})`,
    );
    for (const dead of outcome.deadLetters)
      print(`${dead.key}  after ${dead.attempts} attempts: ${dead.error}`);
    return outcome;
  } finally {
    stop.abort();
    await running;
    await backend.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
}
