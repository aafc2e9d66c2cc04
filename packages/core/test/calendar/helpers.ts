import {
  type Backend,
  createMemoryBackend,
  type Declaration,
  ManualClock,
  MemoryDatabase,
  Registry,
  type ScheduleRecord,
  Scheduler,
  type SchedulerConfig,
} from '../../src/index.js';
import { FaultyLeases } from '../lease/faulty-leases.js';

/** Where the default world's clock starts: 30 s before a whole minute, so nothing is due at start. */
export const START = Date.UTC(2026, 2, 2, 9, 59, 30); // Monday 2026-03-02
/** The first whole minute after {@link START}. */
export const T0 = Date.UTC(2026, 2, 2, 10, 0, 0);

/** A promise with its resolve function, for handlers the test finishes by hand. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** One shared in-memory database and clock, and schedulers on it (replicas in one process). */
export class World {
  readonly clock: ManualClock;
  readonly database: MemoryDatabase;
  readonly backend: Backend<undefined>;
  readonly schedulers: Scheduler[] = [];

  constructor(start = START) {
    this.clock = new ManualClock(start);
    this.database = new MemoryDatabase({ clock: this.clock });
    this.backend = createMemoryBackend({ database: this.database, clock: this.clock });
  }

  /** A replica: its own backend instance on the shared data, leases behind a fault injector. */
  replica(
    declarations: Declaration[],
    config: Partial<SchedulerConfig> = {},
    faults?: (leases: FaultyLeases) => void,
  ): { scheduler: Scheduler; leases: FaultyLeases; done: Promise<void> } {
    const backend = createMemoryBackend({ database: this.database, clock: this.clock });
    const leases = new FaultyLeases(backend.leases);
    faults?.(leases);
    const scheduler = new Scheduler({
      registry: new Registry(...declarations),
      leases,
      cursors: backend.cursors,
      clock: this.clock,
      pollInterval: 1000,
      leadershipTTL: 3000,
      grace: 5000,
      ...config,
    });
    this.schedulers.push(scheduler);
    const done = scheduler.run();
    return { scheduler, leases, done };
  }

  advance(ms: number): Promise<void> {
    return this.clock.advance(ms);
  }

  /** Stops every scheduler at once (handlers still running are cancelled). */
  async stopAll(): Promise<void> {
    const stops = this.schedulers.map((s) => s.stop());
    await this.clock.advance(0);
    await Promise.all(stops);
  }
}

/** Records of `scheduler`, without the scheduler-wide ones unless asked. */
export function records(scheduler: Scheduler, schedule?: string): ScheduleRecord[] {
  return scheduler.snapshot().history.filter((r) => schedule === undefined || r.schedule === schedule);
}

/** `state/reason` of each record, compactly. */
export function outcomes(list: ScheduleRecord[]): string[] {
  return list.map((r) => (r.reason ? `${r.state}/${r.reason}` : r.state));
}

export function iso(ms: number | Date): string {
  return new Date(ms).toISOString();
}
