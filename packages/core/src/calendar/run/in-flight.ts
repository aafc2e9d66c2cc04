import type { Logger } from '../../logger.js';
import type { ScheduleRecord } from '../decide/records.js';
import type { ActiveRun, RunRequest } from './run-types.js';
import type { Runner } from './runner.js';

/** Something started that drain and stop wait for. */
interface Entry {
  run: ActiveRun | undefined;
  settled: Promise<void>;
}

/** The runs a scheduler started and whose handlers have not settled yet (drain waits for them). */
export class InFlightRuns {
  readonly #entries = new Set<Entry>();

  get size(): number {
    return this.#entries.size;
  }

  /** Starts a run through `runner`; `onFinished` gets its final record. */
  async start(
    runner: Runner,
    request: RunRequest,
    onFinished: (record: ScheduleRecord) => void,
    logger: Logger,
  ): Promise<ActiveRun> {
    let resolveSettled!: () => void;
    const entry: Entry = {
      run: undefined,
      settled: new Promise<void>((resolve) => {
        resolveSettled = resolve;
      }),
    };
    this.#entries.add(entry);
    void entry.settled.then(() => this.#entries.delete(entry));
    try {
      const run = await runner.start(request);
      entry.run = run;
      void run.finished.then(onFinished);
      void run.settled.then(resolveSettled);
      return run;
    } catch (error) {
      // The runner records every outcome itself; reaching here is a bug, not a handler's failure.
      logger.error('could not start an occurrence', { schedule: request.invocation.schedule, error });
      resolveSettled();
      throw error;
    }
  }

  /** Resolves when every run started so far has settled. */
  allSettled(): Promise<unknown> {
    return Promise.allSettled([...this.#entries].map((e) => e.settled));
  }

  /** Stops renewing the overlap leases of runs still going (the process is leaving). */
  abandonAll(): void {
    for (const entry of this.#entries) entry.run?.abandon();
  }
}
