import { DueHeap, type HeapItem } from '../calendar/decide/heap.js';
import type { Clock } from '../clock.js';
import { ClosedError, InvalidArgumentError } from '../errors.js';
import { Emitter, type Listener, type Observable } from '../events.js';
import type { Logger } from '../logger.js';
import { RunLoop } from '../run-loop.js';
import type { Delivery } from '../store/delivery.js';
import {
  type CoreStoreInternals,
  claimLimit,
  dueByWatch,
  isCoreStore,
  openDelivery,
  type Store,
} from '../store/store.js';
import type { StoreChange } from '../store/types.js';
import { resolveTelemetryOption } from '../telemetry/binding.js';
import { DeliveryTelemetry } from '../telemetry/delivery.js';
import {
  loadedOpenTelemetry,
  loadOpenTelemetry,
  type OpenTelemetryApi,
  type TelemetryOption,
} from '../telemetry/otel.js';
import { duration, MAX_TIMER_MS, positiveInteger } from '../validate.js';
import { exponentialBackoff } from './backoff.js';
import { type BatchObserver, type BatchResult, isIsolated, type ObservedPart, runBatch } from './batch.js';
import { processorOf, telemetryOption } from './dispatcher-options.js';
import { reportParts } from './dispatcher-report.js';
import {
  DISPATCHER_EVENTS,
  type DispatcherEvents,
  type DispatcherOptions,
  type DispatcherSnapshot,
  type MessageTypes,
  type Processor,
} from './types.js';

export * from './backoff.js';
export * from './types.js';

/** The largest `batchSize` (a backend may allow fewer: see its store's claim limit). */
export const MAX_BATCH_SIZE = 10_000;
/** Failed attempts before a message is dead-lettered, unless `maxAttempts` says otherwise. */
export const DEFAULT_MAX_ATTEMPTS = 20;
/** Claimed by the first batch, before the dispatcher has seen how long processors take. */
const FIRST_BATCH = 16;
/** The most due instants a push channel's reports keep (see `dueByWatch`). */
const MAX_REPORTED = 100_000;

/**
 * Delivers due schedules to a processor, in delivery batches whose commits consume the schedules together
 * with the processors' writes.
 *
 * The loop: while a slot is free (`concurrency`) and work may be due, open a delivery (the backend claims
 * and consumes up to a batch of due schedules in one transaction) and run it in the background; then sleep
 * until the earliest deadline, a local commit, a remote change notification, a finishing batch or claim,
 * `wake()`, or `rescanInterval`, whichever comes first. Claims run in the background too, a slot each; on a
 * store that reports its due instants (NATS), a deadline that comes while one is under way starts another
 * beside it. A batch runs its processors one after another, each in its own savepoint (or all at once:
 * see the `pipeline` option), and commits once: per message, the processor's writes and the consumption
 * commit together or not at all; a failure rolls back only that message's part and records the failed
 * attempt (or the dead letter) in the same commit. A crash mid-batch leaves every claimed schedule
 * pending: it is redelivered and every effect still commits once. A batch never waits for more work.
 */
export class Dispatcher<M extends MessageTypes = MessageTypes, Sql = unknown>
  implements Observable<DispatcherEvents>
{
  readonly #store: Store<Sql> & CoreStoreInternals<Sql>;
  readonly #processor: Processor<Sql>;
  readonly #rescanInterval: number;
  readonly #watchedRescanInterval: number;
  readonly #retryDelay: (attempt: number, error: unknown) => number;
  readonly #concurrency: number;
  readonly #maxAttempts: number;
  readonly #onDeadLetter: DispatcherOptions<M, Sql>['onDeadLetter'];
  readonly #drainTimeout: number;
  readonly #batchSize: number;
  readonly #batchDuration: number;
  readonly #pipeline: boolean;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #telemetryOption: TelemetryOption | undefined;
  readonly #events: Emitter<DispatcherEvents>;
  #telemetry: DeliveryTelemetry | undefined;

  readonly #loop: RunLoop;
  readonly #batches = new Set<Promise<void>>();
  /**
   * Claims under way, each until its batch started (or its delivery was given back). They take slots as
   * batches do. On a store that reports its due instants, a deadline that comes while one runs starts
   * another, so a slow claim delays no schedule falling due behind it (see {@link #mayClaim}).
   */
  readonly #claiming = new Set<Promise<void>>();
  /** When the latest claim looked (its `now`): what fell due by then, it or an earlier one claims. */
  #lastClaimAt = Number.NEGATIVE_INFINITY;
  /** A claim holds a schedule that crashed its process and waits for the rest to finish to run it alone. */
  #aloneWaiting = false;
  /** Consecutive failed looks (claims or reads of the next deadline), for the pause before the next. */
  #scanFailures = 0;
  readonly #abort = new AbortController();
  /** Work may be due that no open batch holds: claim before sleeping. */
  #mayHaveDue = true;
  /** Consecutive looks that found work due but none claimable (held by other open deliveries). */
  #heldLooks = 0;
  /**
   * The due instants the store's push channel reported that no claim has looked past yet, earliest first:
   * what a store whose engine keeps the time (`dueByWatch`) tells instead of a next deadline.
   */
  readonly #reported = new DueHeap<HeapItem>();
  /**
   * Set when a batch put back a schedule whose last attempt crashed its process: claims take one schedule
   * at a time until such a schedule comes alone, so it never runs beside another.
   */
  #isolating = false;
  /** A schedule that crashed its process is running alone: no other batch starts meanwhile. */
  #exclusive = false;
  /** Consecutive failed batches, and until when no new batch is opened because of them. */
  #batchFailures = 0;
  #holdUntil = Number.NEGATIVE_INFINITY;
  /** Mean real time one processor takes, in ms (undefined until measured). */
  #meanProcessMs: number | undefined;
  #stats = {
    batches: 0,
    delivered: 0,
    failed: 0,
    retried: 0,
    deadLettered: 0,
    skipped: 0,
    conflicts: 0,
    missed: 0,
  };

  constructor(options: DispatcherOptions<M, Sql>) {
    if (typeof options !== 'object' || options === null)
      throw new InvalidArgumentError('options', options, 'must be an object { store, processor, ... }');
    if (!isCoreStore<Sql>(options.store))
      throw new InvalidArgumentError(
        'options.store',
        options.store,
        'must be a duetime Store (backend.store, made by a backend)',
      );
    this.#store = options.store;
    this.#processor = processorOf(options);
    this.#rescanInterval = duration('options.rescanInterval', options.rescanInterval ?? 1000);
    this.#watchedRescanInterval = duration(
      'options.watchedRescanInterval',
      options.watchedRescanInterval ?? 30_000,
      { max: MAX_TIMER_MS },
    );
    const retryDelay = options.retryDelay ?? exponentialBackoff();
    if (typeof retryDelay === 'function') {
      this.#retryDelay = (attempt, error) =>
        duration('retryDelay()', retryDelay(attempt, error), { allowZero: true });
    } else {
      const fixed = duration('options.retryDelay', retryDelay, { allowZero: true });
      this.#retryDelay = () => fixed;
    }
    this.#concurrency = positiveInteger('options.concurrency', options.concurrency ?? 1);
    this.#maxAttempts =
      options.maxAttempts === Number.POSITIVE_INFINITY
        ? Number.POSITIVE_INFINITY
        : positiveInteger('options.maxAttempts', options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS);
    if (options.onDeadLetter !== undefined && typeof options.onDeadLetter !== 'function')
      throw new InvalidArgumentError('options.onDeadLetter', options.onDeadLetter, 'must be a function');
    this.#onDeadLetter = options.onDeadLetter;
    this.#drainTimeout = duration('options.drainTimeout', options.drainTimeout ?? 30_000, {
      allowZero: true,
    });
    const maxBatch = Math.min(MAX_BATCH_SIZE, this.#store[claimLimit] ?? MAX_BATCH_SIZE);
    this.#batchSize = positiveInteger('options.batchSize', options.batchSize ?? Math.min(256, maxBatch));
    if (this.#batchSize > maxBatch)
      throw new InvalidArgumentError(
        'options.batchSize',
        options.batchSize,
        maxBatch < MAX_BATCH_SIZE
          ? `must be at most ${maxBatch} on the ${this.#store.backendName} backend (the most one of its deliveries can claim)`
          : `must be at most ${MAX_BATCH_SIZE}`,
      );
    this.#batchDuration = duration('options.batchDuration', options.batchDuration ?? 50);
    if (options.pipeline !== undefined && typeof options.pipeline !== 'boolean')
      throw new InvalidArgumentError('options.pipeline', options.pipeline, 'must be true or false');
    this.#pipeline = options.pipeline ?? false;
    this.#logger = options.logger ?? this.#store.logger;
    this.#clock = options.clock ?? this.#store.clock;
    this.#loop = new RunLoop('dispatcher', this.#clock);
    this.#telemetryOption = resolveTelemetryOption(telemetryOption(options.telemetry), this.#logger);
    this.#events = new Emitter<DispatcherEvents>('dispatcher', DISPATCHER_EVENTS, () => this.#logger);
  }

  /**
   * Listens to `name` (see {@link DispatcherEvents}); returns a function that stops listening. Listeners
   * run after the batch commit, once per message; one that throws is logged and changes nothing.
   */
  on<K extends keyof DispatcherEvents>(name: K, listener: Listener<DispatcherEvents[K]>): () => void {
    return this.#events.on(name, listener);
  }

  /** Like {@link on}, for the next event only. */
  once<K extends keyof DispatcherEvents>(name: K, listener: Listener<DispatcherEvents[K]>): () => void {
    return this.#events.once(name, listener);
  }

  /** Removes a listener added with {@link on}. */
  off<K extends keyof DispatcherEvents>(name: K, listener: Listener<DispatcherEvents[K]>): void {
    this.#events.off(name, listener);
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

  /** Forces a look at the due index now, e.g. after a change the push channel cannot see. */
  wake(): void {
    this.#mayHaveDue = true;
    this.#loop.wake();
  }

  /**
   * Stops taking new work and waits for open batches, up to `drainTimeout`; then aborts their processors'
   * signals and returns. A batch being drained puts back the schedules it has not started and commits what
   * it delivered; nothing is lost.
   */
  async drain(): Promise<void> {
    await this.#loop.drain();
  }

  snapshot(): DispatcherSnapshot {
    return {
      running: this.#loop.state === 'running',
      draining: this.#loop.state === 'draining',
      inFlight: this.#batches.size,
      ...this.#stats,
    };
  }

  async #run(): Promise<void> {
    this.#startTelemetry();
    const unsubscribe = this.#store.onChange((change) => this.#onChange(change));
    try {
      while (this.#loop.running) {
        this.#loop.takeWake();
        let wait: number;
        try {
          wait = await this.#tick();
        } catch (error) {
          wait = this.#scanFailed(error);
        }
        // A deadline or a rescan that came: look again. The wake-ups that mean so (a commit, a finishing
        // batch, `wake()`) say it themselves; a claim that ended only has the next sleep worked out again.
        if (await this.#loop.sleep(wait)) this.#mayHaveDue = true;
      }
    } finally {
      unsubscribe();
      await this.#finishBatches();
      this.#telemetry?.close();
    }
  }

  /**
   * Sets up telemetry without delaying the loop: at once when the API is given or already loaded, else
   * once the lazy import settles (batches opened before that go unrecorded).
   */
  #startTelemetry(): void {
    const option = this.#telemetryOption;
    if (option === false) return;
    const attach = (api: OpenTelemetryApi | null | undefined) => {
      if (!api || this.#telemetry || this.#loop.state === 'stopped') return;
      try {
        this.#telemetry = new DeliveryTelemetry(api, option ?? {}, this.#store, () => this.#clock.now());
      } catch (error) {
        this.#logger.warn('OpenTelemetry instruments could not be created; running without them', { error });
      }
    };
    const known = option?.api ?? loadedOpenTelemetry();
    if (known !== undefined) attach(known);
    else void loadOpenTelemetry().then(attach);
  }

  #onChange(change: StoreChange): void {
    // A channel that came back (or went away): changes may have been missed, look again.
    if (change.channel !== undefined) this.wake();
    else {
      // Bounded: past it, full claims keep the dispatcher claiming anyway.
      if (change.earliest !== undefined && this.#store[dueByWatch] && this.#reported.size < MAX_REPORTED)
        this.#reported.upsert({ due: change.earliest.getTime(), heapIndex: -1 });
      // A deadline reported while a pass runs bounds the sleep after it; only one that has come already
      // (a claim under way may have looked before it was there) starts another pass at once.
      if (change.earliest === undefined || change.earliest.getTime() <= this.#clock.now()) this.wake();
      else this.#loop.lookBy(change.earliest.getTime());
    }
  }

  /** The longest sleep: long while the push channel reports every change, short when it cannot. */
  get #backstop(): number {
    return this.#store.watching ? this.#watchedRescanInterval : this.#rescanInterval;
  }

  /** How many schedules the next batch claims: fewer when processors are slow, one while isolating. */
  #limit(): number {
    if (this.#isolating) return 1;
    const mean = this.#meanProcessMs;
    if (mean === undefined) return Math.min(this.#batchSize, FIRST_BATCH);
    return Math.max(1, Math.min(this.#batchSize, Math.floor(this.#batchDuration / Math.max(mean, 0.001))));
  }

  /** Starts claims while slots are free and work may be due; returns how long to sleep. */
  async #tick(): Promise<number> {
    const holdFor = this.#holdUntil - this.#clock.now();
    if (holdFor > 0) return Math.min(holdFor, this.#rescanInterval);
    while (this.#loop.running && this.#mayHaveDue && this.#mayClaim()) {
      const limit = this.#limit();
      const claimedAt = this.#clock.now();
      this.#lastClaimAt = claimedAt;
      // This claim looks at everything due by `claimedAt`; a full one says there may be more.
      this.#mayHaveDue = false;
      const self: { task?: Promise<void> } = {};
      const task = this.#claim(claimedAt, limit, this.#isolating, self).finally(() => {
        this.#claiming.delete(task);
        // The next sleep is worked out again (a full claim has set `mayHaveDue`).
        this.#loop.wake();
      });
      self.task = task;
      this.#claiming.add(task);
    }
    const backstop = this.#backstop;
    // Slots are full, or claims must come one at a time: a finishing batch or claim wakes the loop.
    if (!this.#mayClaim() || !this.#loop.running) return backstop;
    if (this.#mayHaveDue) return 0;
    const claimedAt = this.#lastClaimAt;
    // An engine that reports schedules as they fall due is not asked for the next one: what it reported
    // and no claim has looked past yet is the next.
    while ((this.#reported.peek()?.due ?? Number.POSITIVE_INFINITY) <= claimedAt) this.#reported.pop();
    const watched = this.#store[dueByWatch];
    const reported = this.#reported.peek()?.due;
    const next = watched
      ? reported === undefined
        ? undefined
        : new Date(reported)
      : await this.#store.nextDueAt();
    this.#scanFailures = 0;
    if (next === undefined) return backstop;
    const delay = next.getTime() - this.#clock.now();
    if (delay > 0) return Math.min(delay, backstop);
    if (next.getTime() > claimedAt) {
      // It fell due after the last claim looked (during this pass, or a retry since): claim again now.
      this.#mayHaveDue = true;
      return 0;
    }
    // Due, yet nothing could be claimed: open deliveries hold it. Ours wake the loop when they finish;
    // another process's are looked at again after a growing pause.
    if (this.#batches.size > 0 || this.#claiming.size > 0) return backstop;
    this.#heldLooks++;
    return Math.min(this.#rescanInterval, 25 * 2 ** Math.min(this.#heldLooks - 1, 6));
  }

  /**
   * Whether a claim may start now: a slot is free, nothing runs alone, and no claim is under way unless
   * the store reports its due instants (and no schedule is being isolated). A store that is asked for its
   * next deadline claims one at a time: its claims and its batches' commits share one connection or one
   * lock (SQLite), where claims beside one another only queue (a drain of 20,000 due at concurrency 16
   * went about 17 % slower on SQLite with them).
   */
  #mayClaim(): boolean {
    return (
      !this.#exclusive &&
      !this.#aloneWaiting &&
      this.#batches.size + this.#claiming.size < this.#concurrency &&
      (this.#claiming.size === 0 || (this.#store[dueByWatch] === true && !this.#isolating))
    );
  }

  /** A look that failed: logged, and the next one waits a growing pause (returned, in ms). */
  #scanFailed(error: unknown): number {
    this.#scanFailures++;
    const wait = Math.min(this.#rescanInterval, 50 * 2 ** Math.min(this.#scanFailures, 10));
    this.#logger.warn('dispatcher scan failed; retrying', {
      error,
      retryInMs: wait,
      failures: this.#scanFailures,
    });
    return wait;
  }

  /**
   * Claims up to `limit` schedules due by `claimedAt` and starts their batch. `isolating`: whether the
   * claim looks for schedules to run alone (only its answer may end the isolating: a larger claim still
   * in flight when a batch sent isolated ones back must not end it, or concurrent batches claim and send
   * them back without end). `self` is this claim's own task, which it does not wait for.
   */
  async #claim(
    claimedAt: number,
    limit: number,
    isolating: boolean,
    self: { task?: Promise<void> },
  ): Promise<void> {
    let delivery: Delivery<Sql>;
    try {
      delivery = await this.#store[openDelivery]({ now: new Date(claimedAt), limit });
    } catch (error) {
      const wait = this.#scanFailed(error);
      this.#holdUntil = Math.max(this.#holdUntil, this.#clock.now() + wait);
      this.#mayHaveDue = true;
      return;
    }
    this.#scanFailures = 0;
    if (delivery.claimed.length >= limit) this.#mayHaveDue = true;
    if (delivery.claimed.length > 0 && this.#loop.running) {
      this.#heldLooks = 0;
      if (isolating && !isAlone(delivery)) this.#isolating = false;
      // While a schedule that crashed its process waits to run alone (or runs), what others claimed goes
      // back, to be claimed again after it; a second such schedule waits its turn the same way.
      if (!this.#exclusive && !this.#aloneWaiting) {
        if (isAlone(delivery)) {
          // It runs with nothing else in this process.
          this.#aloneWaiting = true;
          try {
            await Promise.allSettled([
              ...this.#batches,
              ...[...this.#claiming].filter((t) => t !== self.task),
            ]);
          } finally {
            this.#aloneWaiting = false;
          }
          if (this.#loop.running) this.#exclusive = true;
        }
        if (this.#loop.running) {
          const settings = this.#batchSettings();
          this.#start(runBatch(delivery, settings), settings.observer);
          return;
        }
      }
      this.#mayHaveDue = true;
    }
    try {
      await delivery.rollback();
    } catch (error) {
      this.#logger.warn('giving back an unused delivery failed; its claims lapse', { error });
    }
  }

  #batchSettings() {
    return {
      processor: this.#processor,
      onDeadLetter: this.#onDeadLetter,
      maxAttempts: this.#maxAttempts,
      retryDelay: this.#retryDelay,
      clock: this.#clock,
      logger: this.#logger,
      signal: this.#abort.signal,
      running: () => this.#loop.running,
      budgetMs: this.#batchDuration,
      pipeline: this.#pipeline,
      observer: this.#observer(),
    };
  }

  /** A watch over the next batch's parts, when anyone listens or telemetry is on (else nothing, no cost). */
  #observer(): BatchObserver | undefined {
    const telemetry = this.#telemetry;
    if (!telemetry && !this.#events.has()) return undefined;
    return {
      parts: [],
      begin: (part) => telemetry?.begin(part),
      run: (part, fn) => (telemetry ? telemetry.run(part, fn) : fn()),
    };
  }

  /** Tells of each part's fate once its batch committed or rolled back. Never throws. */
  #report(parts: readonly ObservedPart[]): void {
    reportParts(parts, this.#telemetry, this.#events, this.#logger);
  }

  #start(batch: Promise<BatchResult>, observer: BatchObserver | undefined): void {
    const tracked: Promise<void> = batch.then(
      (result) => {
        this.#finished(result);
        if (observer) this.#report(observer.parts);
      },
      (error: unknown) => {
        if (observer) this.#report(observer.parts);
        this.#batchFailures++;
        const wait = Math.min(this.#rescanInterval, 50 * 2 ** Math.min(this.#batchFailures, 10));
        this.#holdUntil = this.#clock.now() + wait;
        this.#logger.warn('a delivery batch failed; its schedules stay pending', {
          error,
          retryInMs: wait,
          failures: this.#batchFailures,
        });
      },
    );
    const settled = tracked.finally(() => {
      this.#batches.delete(settled);
      this.#exclusive = false;
      // A free slot, and perhaps more due behind this batch: look again.
      if (this.#loop.running) this.wake();
    });
    this.#batches.add(settled);
  }

  #finished(result: BatchResult): void {
    this.#batchFailures = 0;
    this.#stats.batches++;
    this.#stats.delivered += result.delivered;
    this.#stats.failed += result.failed;
    this.#stats.retried += result.retried;
    this.#stats.deadLettered += result.deadLettered;
    this.#stats.skipped += result.skipped;
    this.#stats.conflicts += result.conflicts;
    this.#stats.missed += result.missed;
    if (result.isolated > 0) this.#isolating = true;
    if (result.isolated > 0 || result.returned > 0)
      this.#logger.debug('a delivery batch sent schedules back', {
        isolated: result.isolated,
        returned: result.returned,
        processed: result.processed,
      });
    if (result.processed > 0) {
      const mean = result.processMs / result.processed;
      this.#meanProcessMs = this.#meanProcessMs === undefined ? mean : this.#meanProcessMs * 0.7 + mean * 0.3;
    }
  }

  async #finishBatches(): Promise<void> {
    if (this.#batches.size === 0 && this.#claiming.size === 0) return;
    let timedOut = false;
    const cancelTimer: { fn?: () => void } = {};
    await Promise.race([
      // Claims under way give their deliveries back (the loop no longer runs) and start no batch.
      Promise.allSettled([...this.#claiming]).then(() => Promise.allSettled([...this.#batches])),
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
        inFlight: this.#batches.size,
      });
      this.#abort.abort(new ClosedError('dispatcher'));
    }
  }
}

/** Whether a delivery holds exactly one schedule that crashed its process last time. */
function isAlone(delivery: Delivery<unknown>): boolean {
  return delivery.claimed.length === 1 && isIsolated(delivery.claimed[0]!);
}
