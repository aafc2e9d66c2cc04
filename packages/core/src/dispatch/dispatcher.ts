import type { Clock } from '../clock.js';
import { ClosedError, ConflictError, DuetimeError, InvalidArgumentError } from '../errors.js';
import type { Logger } from '../logger.js';
import { RunLoop } from '../run-loop.js';
import { consumeSchedule, type Store, type Transaction } from '../store/store.js';
import type { Message, Schedule, StoreChange } from '../store/types.js';
import { duration, positiveInteger } from '../validate.js';

/**
 * Thrown by a processor to say "not now, try again later" without it being logged as a failure or
 * counted toward `maxAttempts`. {@link ErrRetry} is the ready-made instance; `new RetryError({ delay })`
 * picks the delay.
 */
export class RetryError extends DuetimeError {
  readonly delay: number | undefined;

  constructor(options: { delay?: number; reason?: string } = {}) {
    super('DUETIME_RETRY', options.reason ?? 'retry requested by the processor');
    this.delay =
      options.delay === undefined ? undefined : duration('delay', options.delay, { allowZero: true });
  }
}

/** The sentinel a processor throws to retry after `retryDelay`, quietly. */
export const ErrRetry: RetryError = new RetryError();

/** What a processor gets besides the transaction and the message. */
export interface DeliveryContext {
  /** The schedule being delivered (the version consumed by this transaction). */
  schedule: Schedule;
  /** 1 for the first delivery, counting failed attempts before it. */
  attempt: number;
  /** Aborted when the dispatcher gives up waiting for processors at the end of a drain. */
  signal: AbortSignal;
}

/**
 * Handles one due message. Its writes through `tx` commit atomically with the schedule's consumption;
 * a thrown error rolls them back and leaves the schedule pending for a retry.
 */
export type Processor<Sql = unknown> = (
  tx: Transaction<Sql>,
  message: Message,
  context: DeliveryContext,
) => void | Promise<void>;

/** A message given up on after `maxAttempts` failed deliveries. */
export interface DeadLetter {
  schedule: Schedule;
  error: unknown;
  attempts: number;
}

export interface DispatcherOptions<Sql = unknown> {
  store: Store<Sql>;
  processor: Processor<Sql>;
  /** Backstop rescan period in ms (default 1000); also the longest the dispatcher ever sleeps. */
  rescanInterval?: number;
  /**
   * Delay before retrying a failed delivery, in ms (default 1000), or a function of the attempt number
   * (1 for the first failure) and the error, for backoff.
   */
  retryDelay?: number | ((attempt: number, error: unknown) => number);
  /** Deliveries in flight at once (default 1). */
  concurrency?: number;
  /** Failed deliveries after which the message is dead-lettered (default: never). */
  maxAttempts?: number;
  /**
   * Called when a message is dead-lettered, inside the transaction that consumes it, so a record of it
   * commits atomically with the consumption.
   */
  onDeadLetter?: (dead: DeadLetter, tx: Transaction<Sql>) => void | Promise<void>;
  /** How long `drain()` waits for processors before aborting their signals and returning (default 30,000 ms). */
  drainTimeout?: number;
  /** Schedules fetched per query (default: max(16, 4 × concurrency)). Bounds memory, whatever the backlog. */
  batchSize?: number;
  logger?: Logger;
  /** Defaults to the store's clock. */
  clock?: Clock;
}

export interface DispatcherSnapshot {
  running: boolean;
  draining: boolean;
  inFlight: number;
  delivered: number;
  failed: number;
  retried: number;
  deadLettered: number;
  skipped: number;
}

/**
 * Delivers due schedules to a processor, each in a transaction that consumes the schedule.
 *
 * The loop: fetch a page of due schedules (never the whole backlog), start deliveries up to
 * `concurrency`, then sleep until the earliest deadline, a local commit, a remote change notification,
 * `wake()`, or `rescanInterval`, whichever comes first. Each delivery stages the consumption of the
 * schedule's version before the processor runs; the commit makes the consumption and the processor's
 * writes durable together. A stale version is skipped; a concurrent replacement aborts the commit and the
 * new version is delivered later; an error leaves the schedule pending, retried after `retryDelay`.
 */
export class Dispatcher<Sql = unknown> {
  readonly #store: Store<Sql>;
  readonly #processor: Processor<Sql>;
  readonly #rescanInterval: number;
  readonly #retryDelay: (attempt: number, error: unknown) => number;
  readonly #concurrency: number;
  readonly #maxAttempts: number;
  readonly #onDeadLetter: DispatcherOptions<Sql>['onDeadLetter'];
  readonly #drainTimeout: number;
  readonly #batchSize: number;
  readonly #logger: Logger;
  readonly #clock: Clock;

  readonly #loop: RunLoop;
  readonly #inFlight = new Map<string, Promise<void>>();
  /** Local backoff for schedules whose failure could not be recorded (backend unreachable). */
  readonly #localBackoff = new Map<string, number>();
  readonly #abort = new AbortController();
  /** A change notification arrived: the buffer may miss a schedule that is due earlier. */
  #changed = false;
  #buffer: Schedule[] = [];
  /** The last page read was full: more may be due behind it (true also when nothing was read yet). */
  #bufferFull = true;
  #bufferedAt = Number.NEGATIVE_INFINITY;
  #stats = { delivered: 0, failed: 0, retried: 0, deadLettered: 0, skipped: 0 };

  constructor(options: DispatcherOptions<Sql>) {
    if (typeof options !== 'object' || options === null)
      throw new InvalidArgumentError('options', options, 'must be an object { store, processor, ... }');
    if (typeof options.store?.transact !== 'function')
      throw new InvalidArgumentError(
        'options.store',
        options.store,
        'must be a duetime Store (backend.store)',
      );
    if (typeof options.processor !== 'function')
      throw new InvalidArgumentError(
        'options.processor',
        options.processor,
        'must be a function (tx, message) => Promise<void>',
      );
    this.#store = options.store;
    this.#processor = options.processor;
    this.#rescanInterval = duration('options.rescanInterval', options.rescanInterval ?? 1000);
    const retryDelay = options.retryDelay ?? 1000;
    if (typeof retryDelay === 'function') {
      this.#retryDelay = (attempt, error) =>
        duration('retryDelay()', retryDelay(attempt, error), { allowZero: true });
    } else {
      const fixed = duration('options.retryDelay', retryDelay, { allowZero: true });
      this.#retryDelay = () => fixed;
    }
    this.#concurrency = positiveInteger('options.concurrency', options.concurrency ?? 1);
    this.#maxAttempts =
      options.maxAttempts === undefined
        ? Number.POSITIVE_INFINITY
        : positiveInteger('options.maxAttempts', options.maxAttempts);
    if (options.onDeadLetter !== undefined && typeof options.onDeadLetter !== 'function')
      throw new InvalidArgumentError('options.onDeadLetter', options.onDeadLetter, 'must be a function');
    this.#onDeadLetter = options.onDeadLetter;
    this.#drainTimeout = duration('options.drainTimeout', options.drainTimeout ?? 30_000, {
      allowZero: true,
    });
    this.#batchSize = positiveInteger(
      'options.batchSize',
      options.batchSize ?? Math.max(16, 4 * this.#concurrency),
    );
    this.#logger = options.logger ?? this.#store.logger;
    this.#clock = options.clock ?? this.#store.clock;
    this.#loop = new RunLoop('dispatcher', this.#clock);
  }

  /**
   * Runs until `signal` aborts (then drains) or `drain()` is called. Resolves when stopped. Can be called
   * once per dispatcher.
   */
  run(signal?: AbortSignal): Promise<void> {
    return this.#loop.start(
      () => this.#run(),
      signal,
      () => void this.drain(),
    );
  }

  /** Resolves when the dispatcher has stopped (immediately when it never ran). */
  get done(): Promise<void> {
    return this.#loop.done;
  }

  /** Forces a rescan now, e.g. after a change the push channel cannot see. */
  wake(): void {
    this.#changed = true;
    this.#loop.wake();
  }

  /**
   * Stops taking new work and waits for deliveries in flight, up to `drainTimeout`; then aborts their
   * signals and returns. Their transactions still commit or roll back on their own: nothing is lost.
   */
  async drain(): Promise<void> {
    await this.#loop.drain();
  }

  snapshot(): DispatcherSnapshot {
    return {
      running: this.#loop.state === 'running',
      draining: this.#loop.state === 'draining',
      inFlight: this.#inFlight.size,
      ...this.#stats,
    };
  }

  async #run(): Promise<void> {
    const unsubscribe = this.#store.onChange((change) => this.#onChange(change));
    let failures = 0;
    try {
      while (this.#loop.running) {
        this.#loop.takeWake();
        let wait: number;
        try {
          wait = await this.#tick();
          failures = 0;
        } catch (error) {
          failures++;
          wait = Math.min(this.#rescanInterval, 50 * 2 ** Math.min(failures, 10));
          this.#logger.warn('dispatcher scan failed; retrying', { error, retryInMs: wait, failures });
        }
        // The deadline slept for has come: read the due index rather than the leftovers of the last page.
        if (await this.#loop.sleep(wait)) this.#bufferFull = true;
      }
    } finally {
      unsubscribe();
      await this.#finishInFlight();
    }
  }

  #onChange(change: StoreChange): void {
    this.#changed = true;
    if (change.earliest === undefined || change.earliest.getTime() < this.#loop.armedAt) this.#loop.wake();
  }

  #startable(schedule: Schedule): boolean {
    return (
      !this.#inFlight.has(schedule.key) && !this.#localBackoff.has(`${schedule.key}@${schedule.version}`)
    );
  }

  /**
   * Starts what is due; returns how long to sleep before the next look. Due schedules are read a page at
   * a time into a small buffer that finishing deliveries draw from, so a busy dispatcher does not re-read
   * the head of the due index for every delivery (a page is delivered in no particular order; pages go
   * in due order). The buffer is dropped on a change notification and
   * after a rescan period, and a buffered schedule that went stale is simply skipped at consumption.
   */
  async #tick(): Promise<number> {
    const now = this.#clock.now();
    for (const [id, until] of this.#localBackoff) if (until <= now) this.#localBackoff.delete(id);
    if (this.#changed || now - this.#bufferedAt >= this.#rescanInterval) {
      this.#buffer = [];
      this.#bufferFull = true;
      this.#changed = false;
    }
    for (;;) {
      if (this.#buffer.length === 0) {
        // Everything the last page held has started and that page was the whole due set.
        if (!this.#bufferFull) break;
        const page = await this.#store.driver.dueSchedules(new Date(now), this.#batchSize);
        if (!this.#loop.running) return 0;
        // Shuffled within the page: dispatchers reading the same head of the due index then mostly pick
        // different schedules instead of racing for the same ones. Pages still go in due order.
        this.#buffer = shuffle(page.filter((s) => this.#startable(s)));
        this.#bufferFull = page.length >= this.#batchSize;
        this.#bufferedAt = now;
        if (this.#buffer.length === 0) break;
      }
      while (this.#inFlight.size < this.#concurrency && this.#buffer.length > 0) {
        const schedule = this.#buffer.shift()!;
        if (this.#startable(schedule)) this.#start(schedule);
      }
      // Slots are full with work still buffered: a finishing delivery wakes the loop.
      if (this.#buffer.length > 0) return this.#rescanInterval;
      if (!this.#bufferFull) break;
      if (this.#inFlight.size >= this.#concurrency) return this.#rescanInterval;
    }
    const next = await this.#store.driver.nextDueAt();
    if (next === undefined) return this.#rescanInterval;
    const delay = next.getTime() - this.#clock.now();
    if (delay > 0) return Math.min(delay, this.#rescanInterval);
    if (next.getTime() > this.#bufferedAt) {
      // It fell due after the last page was read (during this pass, or a retry since): read again now.
      this.#bufferFull = true;
      return 0;
    }
    // Due now but nothing could start: all in flight (a finishing delivery wakes us), or held back locally
    // (look again when the earliest hold ends).
    if (this.#inFlight.size > 0) return this.#rescanInterval;
    let earliest = Number.POSITIVE_INFINITY;
    for (const until of this.#localBackoff.values()) earliest = Math.min(earliest, until);
    if (earliest === Number.POSITIVE_INFINITY) return Math.min(this.#rescanInterval, 25);
    return Math.max(1, Math.min(this.#rescanInterval, earliest - this.#clock.now()));
  }

  #start(schedule: Schedule): void {
    const delivery = this.#deliver(schedule).finally(() => {
      this.#inFlight.delete(schedule.key);
      // A free slot: take the next buffered schedule (no need to read the due index again).
      if (this.#loop.running) this.#loop.wake();
    });
    this.#inFlight.set(schedule.key, delivery);
  }

  async #deliver(schedule: Schedule): Promise<void> {
    const attempt = schedule.attempts + 1;
    let consumed = false;
    try {
      await this.#store.transact(async (tx) => {
        consumed = await consumeSchedule(tx, schedule.key, schedule.version);
        if (!consumed) return;
        await this.#processor(tx, structuredClone(schedule.message), {
          schedule,
          attempt,
          signal: this.#abort.signal,
        });
      });
      if (consumed) this.#stats.delivered++;
      else this.#skipped(schedule);
    } catch (error) {
      if (error instanceof ConflictError && error.kind === 'schedule') {
        this.#skipped(schedule);
        return;
      }
      await this.#failed(schedule, attempt, error);
    }
  }

  /**
   * The version was stale (it will not come back) or another dispatcher holds it: either way, leave this
   * version alone for a rescan period instead of fetching it again at once.
   */
  #skipped(schedule: Schedule): void {
    this.#stats.skipped++;
    this.#localBackoff.set(`${schedule.key}@${schedule.version}`, this.#clock.now() + this.#rescanInterval);
  }

  async #failed(schedule: Schedule, attempt: number, error: unknown): Promise<void> {
    const quiet = error instanceof RetryError;
    const fields = { key: schedule.key, version: schedule.version, type: schedule.message.type, attempt };
    try {
      if (!quiet && attempt >= this.#maxAttempts) {
        await this.#deadLetter(schedule, attempt, error);
        return;
      }
      const delay = quiet && error.delay !== undefined ? error.delay : this.#retryDelay(attempt, error);
      if (quiet) this.#stats.retried++;
      else {
        this.#stats.failed++;
        this.#logger.warn('processor failed; will retry', { ...fields, error, retryInMs: delay });
      }
      const dueAt = new Date(this.#clock.now() + delay);
      await this.#store.driver.recordFailure(schedule.key, schedule.version, {
        attempts: quiet ? schedule.attempts : attempt,
        dueAt,
        error: describeError(error),
      });
    } catch (recordError) {
      // The backend is unreachable: hold the schedule back locally; it stays pending durably.
      this.#localBackoff.set(
        `${schedule.key}@${schedule.version}`,
        this.#clock.now() + this.#retryDelay(attempt, error),
      );
      this.#logger.error('could not record a failed delivery; backing off locally', {
        ...fields,
        error: recordError,
      });
    }
  }

  async #deadLetter(schedule: Schedule, attempts: number, error: unknown): Promise<void> {
    let consumed = false;
    await this.#store.transact(async (tx) => {
      consumed = await consumeSchedule(tx, schedule.key, schedule.version);
      if (consumed && this.#onDeadLetter) await this.#onDeadLetter({ schedule, error, attempts }, tx);
    });
    if (consumed) {
      this.#stats.deadLettered++;
      this.#logger.error('message dead-lettered', {
        key: schedule.key,
        version: schedule.version,
        type: schedule.message.type,
        attempts,
        error,
      });
    }
  }

  async #finishInFlight(): Promise<void> {
    if (this.#inFlight.size === 0) return;
    let timedOut = false;
    const cancelTimer: { fn?: () => void } = {};
    await Promise.race([
      Promise.allSettled([...this.#inFlight.values()]),
      new Promise<void>((resolve) => {
        cancelTimer.fn = this.#clock.setTimer(this.#drainTimeout, () => {
          timedOut = true;
          resolve();
        });
      }),
    ]);
    cancelTimer.fn?.();
    if (timedOut) {
      this.#logger.warn('drain timed out; aborting processors still running', {
        inFlight: this.#inFlight.size,
      });
      this.#abort.abort(new ClosedError('dispatcher'));
    }
  }
}

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 2000);
  return String(error).slice(0, 2000);
}
