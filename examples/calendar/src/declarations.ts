import {
  aggregate,
  calendar,
  type Event,
  every,
  type Invocation,
  Registry,
  type Store,
  storeTarget,
} from '@duetime/core';

/**
 * Every tick that ran, keyed by occurrence id: the demo's durable log. It also keeps the largest
 * leadership epoch that wrote to it, and refuses a write from a smaller one (see the handler).
 */
export const tickLog = aggregate({
  type: 'calendar-example-ticks',
  initial: () => ({ seen: [] as string[], epoch: 0 }),
  apply: {
    'tick.ran': (state, event: Event) => ({
      seen: [...state.seen, (event.data as TickRun).occurrence],
      epoch: Math.max(state.epoch, (event.data as TickRun).epoch),
    }),
  },
});

/** A tick run by a leader that has since been deposed, after its successor wrote: refused. */
export class StaleLeaderError extends Error {
  constructor(epoch: number, newest: number) {
    super(`stale leader: epoch ${epoch} wrote after epoch ${newest}`);
    this.name = 'StaleLeaderError';
  }
}

export const TICK_LOG = 'calendar-example/ticks';

/** What each tick run records. */
export interface TickRun {
  occurrence: string;
  at: number;
  origin: Invocation['origin'];
  replica: string;
  /** The leadership epoch (fencing token) the tick ran under. */
  epoch: number;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

/**
 * The calendar both replicas declare:
 *
 * - `tick`, every second, with catch-up: after a failover the new leader runs the ticks nobody ran. The
 *   handler is idempotent on the occurrence id (the way to write calendar handlers): a tick whose run
 *   committed just before its leader died is not recorded twice when the next leader runs it again. And
 *   it is fenced by the leadership epoch: the log refuses a write from an epoch older than the newest that
 *   wrote, so a deposed leader whose handler is still going cannot write after its successor has.
 * - `report`, every 3 s, taking 4 s, `withoutOverlap`: the occurrence that finds the previous report still
 *   running is skipped (`overlap_busy`), on whichever replica leads.
 * - `nightly-invoices`, 02:00 Berlin time, turned into one durable message per night by `storeTarget`
 *   (a Dispatcher would deliver it; this demo only declares it).
 */
export function declarations(
  store: Store<unknown>,
  replica: string,
  print: (line: string) => void,
): Registry {
  const tick = every('tick', 1000, async ({ invocation }) => {
    const run: TickRun = {
      occurrence: invocation.occurrence,
      at: invocation.intendedAt.getTime(),
      origin: invocation.origin,
      replica,
      epoch: invocation.epoch ?? 0,
    };
    const fresh = await store.transact((tx) => {
      let raised = false;
      return tx
        .exec(tickLog, TICK_LOG, (state, ag) => {
          // The fence: the log's own check, in the same transaction as the write.
          if (run.epoch < state.epoch) throw new StaleLeaderError(run.epoch, state.epoch);
          if (state.seen.includes(run.occurrence)) return;
          ag.raise('tick.ran', run);
          raised = true;
        })
        .then(() => raised);
    });
    print(`TICK ${run.at} ${run.origin} ${fresh ? 'recorded' : 'already-recorded'} ${run.epoch}`);
  }).with({ catchUp: { window: 60_000, max: 100 } });

  const report = every('report', 3000, async ({ invocation, signal }) => {
    print(`REPORT_START ${invocation.intendedAt.getTime()}`);
    await sleep(4000, signal);
    print(`REPORT_END ${invocation.intendedAt.getTime()}${signal.aborted ? ' aborted' : ''}`);
  }).with({ withoutOverlap: true, overlapTTL: 2000, timeout: 10_000 });

  const nightly = calendar('Europe/Berlin')
    .dailyAt(
      'nightly-invoices',
      '02:00',
      storeTarget(store, (inv) => ({
        type: 'invoices.run',
        aggregateId: 'billing',
        data: { night: inv.intendedAt.toISOString() },
      })),
    )
    .with({ catchUp: { window: 6 * 3_600_000, max: 1 } });

  return new Registry(tick, report, nightly);
}
