import type { Clock } from '../clock.js';
import { DuetimeError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Store, Transaction } from '../store/store.js';
import type { Message, Schedule } from '../store/types.js';
import type { TelemetryOption } from '../telemetry/otel.js';
import { duration } from '../validate.js';

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

/**
 * Thrown by a processor to give up on a message at once: it is dead-lettered without further attempts,
 * whatever `maxAttempts` says (a message that can never succeed: a malformed payload, a deleted entity).
 */
export class UnrecoverableError extends DuetimeError {
  constructor(reason: string, options: { cause?: unknown } = {}) {
    super('DUETIME_UNRECOVERABLE', reason, options);
  }
}

/**
 * The error recorded for an attempt whose process died while delivering the message (a crash, a kill, an
 * out-of-memory): the next claim finds the delivery never settled. It counts toward `maxAttempts` like any
 * failure, and the message is delivered alone from then on, so one that kills its process every time ends
 * in the dead letters without taking other messages with it.
 */
export class DeliveryInterruptedError extends DuetimeError {
  /** The attempt that was interrupted. */
  readonly attempt: number;

  constructor(attempt: number) {
    super(
      'DUETIME_INTERRUPTED',
      `the process delivering this message died during attempt ${attempt} (a crash, a kill or out of memory); it is delivered alone from now on`,
    );
    this.attempt = attempt;
  }
}

/** The dispatcher has no handler for a message's type (see `handlers`): it is dead-lettered at once. */
export class UnknownMessageTypeError extends UnrecoverableError {
  readonly type: string;

  constructor(type: string, known: readonly string[]) {
    super(
      `no handler for message type ${JSON.stringify(type)} (handlers: ${known.map((k) => JSON.stringify(k)).join(', ')})`,
    );
    this.type = type;
  }
}

/** What a processor gets besides the transaction and the message. */
export interface DeliveryContext {
  /** The schedule being delivered (the version consumed by this transaction). */
  schedule: Schedule;
  /** 1 for the first delivery, counting failed attempts before it. */
  attempt: number;
  /** Aborted when the dispatcher gives up waiting for processors at the end of a drain. */
  signal: AbortSignal;
  /** Present for a recurring schedule: the occurrence being delivered. */
  occurrence?: {
    /** The occurrence's instant (the schedule's `at`). */
    at: Date;
    /** Stable across processes and retries (see {@link recurringOccurrenceId}): an idempotency key. */
    id: string;
    /**
     * 1 for the recurrence's first occurrence run, counting delivered and dead-lettered ones. A triggered
     * or backfilled delivery is not counted: it carries the number of runs so far.
     */
    number: number;
    /**
     * `scheduled`: an occurrence of the spec, at its time (or under its catch-up rule); `caught-up`: an
     * occurrence that fell due while the schedule was paused, run on resume; `backfill`: an occurrence run
     * again by `tx.backfillSchedule` (same id as the first time); `triggered`: an extra delivery from
     * `tx.triggerSchedule` (an id of its own).
     */
    kind?: 'scheduled' | 'caught-up' | 'backfill' | 'triggered';
  };
}

/**
 * Handles one due message. Its writes through `tx` commit atomically with the schedule's consumption;
 * a thrown error rolls them back and leaves the schedule pending for a retry.
 */
export type Processor<Sql = unknown, M extends Message = Message> = (
  tx: Transaction<Sql>,
  message: M,
  context: DeliveryContext,
) => void | Promise<void>;

/**
 * The message types a dispatcher handles and the `data` each carries, e.g.
 * `{ 'order.expire': { orderId: string }; 'invoice.remind': { invoiceId: string; attempt: number } }`.
 */
export type MessageTypes = Record<string, unknown>;

/** The messages of a {@link MessageTypes} map: one `Message` per type, its `data` typed. */
export type MessageOf<M extends MessageTypes> = {
  [K in keyof M & string]: Message<M[K]> & { type: K };
}[keyof M & string];

/** One handler per message type: each gets that type's message with its data typed. */
export type Handlers<M extends MessageTypes, Sql = unknown> = {
  [K in keyof M & string]: Processor<Sql, Message<M[K]> & { type: K }>;
};

/** A message given up on after `maxAttempts` failed deliveries. */
export interface DeadLetter {
  schedule: Schedule;
  error: unknown;
  attempts: number;
}

/**
 * Options of a {@link Dispatcher}.
 *
 * Delivery batches: the dispatcher claims up to `batchSize` due schedules in one backend transaction, runs
 * their processors one after another inside it, each in its own savepoint (taken only when the processor
 * touches the transaction), and commits once. A processor's writes and its schedule's consumption commit
 * together or not at all; a failing processor rolls back only its own part and its failure is recorded in
 * the same commit. The trade-off: a slow processor holds its batch's commit, which `batchDuration` bounds.
 */
export interface DispatcherOptions<M extends MessageTypes = MessageTypes, Sql = unknown> {
  store: Store<Sql>;
  /** Handles every message. Give either `processor` or `handlers`. */
  processor?: Processor<Sql, MessageOf<M>>;
  /**
   * One handler per message type (typed by the dispatcher's message map). A message of a type with no
   * handler is dead-lettered at once with an {@link UnknownMessageTypeError}.
   */
  handlers?: Handlers<M, Sql>;
  /**
   * Backstop rescan period in ms while the backend has no push channel or it is down (default 1000): the
   * longest the dispatcher then sleeps.
   */
  rescanInterval?: number;
  /**
   * Backstop rescan period in ms while the backend's push channel is live (default 30,000): the
   * dispatcher then sleeps until the next known deadline, a change or this, whichever comes first, so an
   * idle dispatcher costs almost nothing. It looks again at once whenever the channel reconnects.
   */
  watchedRescanInterval?: number;
  /**
   * Delay before retrying a failed delivery, in ms, or a function of the attempt number (1 for the first
   * failure) and the error. Default: {@link exponentialBackoff}`()`, 1 s doubling up to an hour, with
   * jitter. A {@link RetryError} may carry its own delay.
   */
  retryDelay?: number | ((attempt: number, error: unknown) => number);
  /**
   * Processors running at once (default 1). Each runs in a delivery batch of its own, so this is also the
   * number of delivery transactions open at once (on PostgreSQL, pooled connections in use).
   */
  concurrency?: number;
  /**
   * Failed deliveries after which the message is dead-lettered (default 20: with the default backoff,
   * about ten hours of retries). `Infinity` retries for ever.
   */
  maxAttempts?: number;
  /**
   * Called when a message is dead-lettered, inside the transaction that consumes it, so a record of it
   * commits atomically with the consumption.
   */
  onDeadLetter?: (dead: DeadLetter, tx: Transaction<Sql>) => void | Promise<void>;
  /** How long `drain()` waits for processors before aborting their signals and returning (default 30,000 ms). */
  drainTimeout?: number;
  /**
   * Most schedules one delivery batch claims and commits together (default 256, at most 10,000; a store may
   * claim fewer: its claim limit, 250 on NATS). Fewer are also claimed when processors are slow (see
   * `batchDuration`). Bounds memory, whatever the backlog.
   */
  batchSize?: number;
  /**
   * How long one batch aims to run, in ms (default 50). A batch commits when it has run this long even if
   * it claimed more (the rest go back and are claimed again at once), and the number claimed adapts to how
   * long processors take, so slow processors get small batches and a batch never holds its commit (and,
   * on SQL backends, its row locks and connection) much longer than this.
   */
  batchDuration?: number;
  /**
   * Runs a batch's processors at once instead of one after another (default false), so that on a
   * connection that pipelines (a node-postgres pool made with `pipeline: true`, postgres.js) their
   * statements travel together instead of one round trip each. All of them run under one savepoint: when
   * every processor succeeds, their writes commit with the consumptions as usual; when any fails, the
   * dispatcher waits for the others, undoes all of their writes, and runs the same schedules again one
   * by one, each in its own savepoint, so the failure is recorded against its own message only.
   *
   * What a processor must allow for: it runs beside the batch's others on one transaction (it must not
   * depend on their order), and after a failure of another it runs a second time (its database writes
   * were undone; whatever it did outside the database was not). Takes effect on backends whose
   * processors write through a database transaction (PostgreSQL, SQLite; on SQLite, whose statements
   * run one at a time, it saves nothing); elsewhere processors run one by one as without it.
   * Recurring schedules catching up, a schedule whose last attempt was interrupted by a crash, and
   * batches of one run one by one too.
   */
  pipeline?: boolean;
  logger?: Logger;
  /** Defaults to the store's clock. */
  clock?: Clock;
  /**
   * OpenTelemetry spans and metrics (see {@link TelemetryOptions}). Default: `@opentelemetry/api` loaded
   * lazily when `run()` starts, if installed, with its global providers; `false` turns it off.
   */
  telemetry?: TelemetryOption;
}

/** What every delivery event says about the message. */
export interface DeliveryEvent {
  /** The schedule delivered: key, version, message (with its `trace`), deadline, attempts before. */
  schedule: Schedule;
  /** 1 for the first delivery, counting failed attempts before it. */
  attempt: number;
  /** Present for a recurring schedule: the occurrence. */
  occurrence?: DeliveryContext['occurrence'];
  /** How long after its due time (`dueAt`) the processor started, in ms. */
  latenessMs: number;
  /** Real time the processor (and what its outcome recorded) took, in ms. */
  durationMs: number;
}

/** A delivery whose retry was recorded: the schedule stays pending until `retryAt`. */
export interface FailedDeliveryEvent extends DeliveryEvent {
  error: unknown;
  /** When the next attempt is due. */
  retryAt: Date;
}

/** A message given up on: consumed and kept as a dead letter. */
export interface DeadLetteredEvent extends DeliveryEvent {
  error: unknown;
  /** Failed attempts, this one included. */
  attempts: number;
}

/** Occurrences not run (see {@link DispatcherEvents.missed}). */
export interface MissedEvent extends DeliveryEvent {
  /** How many occurrences were not run (at least this many, past 100,000 of them). */
  count: number;
  /** The first and the last of them. */
  first: Date;
  last: Date;
  /** `catch-up`: the recurrence's catch-up rule; `skipped`: `tx.skipNext`. */
  reason: 'catch-up' | 'skipped';
}

/** A delivery left out by the commit because its version was stale (replaced or consumed elsewhere). */
export interface SkippedDeliveryEvent extends DeliveryEvent {
  reason: 'stale';
}

/**
 * The events of a {@link Dispatcher} (`dispatcher.on(name, listener)`). Each is emitted once per message,
 * after the batch commit decided its fate, so an event never reports a delivery that was rolled back.
 */
export interface DispatcherEvents {
  /** The processor succeeded and its writes committed with the consumption. */
  delivered: DeliveryEvent;
  /** The processor failed; the failed attempt is recorded and a retry is due at `retryAt`. */
  failed: FailedDeliveryEvent;
  /** The processor threw a {@link RetryError}: retried at `retryAt` without counting an attempt. */
  retried: FailedDeliveryEvent & { error: RetryError };
  /** Dead-lettered (after `maxAttempts`, or an {@link UnrecoverableError}). */
  deadLettered: DeadLetteredEvent;
  /** Not applied: the schedule was replaced or consumed before the batch committed. */
  skipped: SkippedDeliveryEvent;
  /**
   * Occurrences of a recurring schedule not run: by its catch-up rule (`reason: 'catch-up'`; the
   * delivery that follows may run a later occurrence) or by `tx.skipNext` (`'skipped'`). One event per
   * schedule and decision, however many occurrences it covers.
   */
  missed: MissedEvent;
}

/** The names of {@link DispatcherEvents}. */
export const DISPATCHER_EVENTS: readonly (keyof DispatcherEvents)[] = Object.freeze([
  'delivered',
  'failed',
  'retried',
  'deadLettered',
  'skipped',
  'missed',
]);

export interface DispatcherSnapshot {
  running: boolean;
  draining: boolean;
  /** Delivery batches open (each runs one processor at a time). */
  inFlight: number;
  /** Delivery batches committed. */
  batches: number;
  delivered: number;
  failed: number;
  retried: number;
  deadLettered: number;
  /** Stale versions (replaced or consumed elsewhere before the batch committed). */
  skipped: number;
  /** Parts left out of a commit by a conflict (an aggregate moved on); they are delivered again. */
  conflicts: number;
  /** Occurrences of recurring schedules not run (catch-up rules and skips), counted one by one. */
  missed: number;
}
