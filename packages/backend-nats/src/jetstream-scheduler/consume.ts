import {
  CorruptDataError,
  DuetimeError,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  positiveInteger,
} from '@duetime/core';
import {
  AckPolicy,
  DeliverPolicy,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { isNotFound, toBackendError } from '../errors.js';
import { parseCron6 } from './cron.js';
import { H } from './headers.js';
import { decodeToken, type SubjectLayout } from './subjects.js';
import { isTerminal } from './terminal.js';

/** Why a fired message was dead-lettered. */
export type DeadLetterReason = 'terminal' | 'max_deliver' | 'undecodable';

/** What a handler learns about a fired message beyond key, payload and firedId. */
export interface FiredInfo {
  /** Stable across redeliveries: `once:<key token>.<timer id>`, `cron:<name>@<ISO instant>`, or `seq:<n>`. */
  firedId: string;
  /** 1 on the first delivery, counting up on each redelivery. */
  deliveries: number;
  /** What fired it. */
  kind: 'once' | 'cron' | 'other';
  /** The cron definition's name, for `kind: 'cron'`. */
  cronName?: string;
  /** The instant it was due, when known. */
  due?: Date;
  subject: string;
  streamSequence: number;
}

/** Context given to the dead-letter handler. */
export interface DeadLetterInfo extends FiredInfo {
  /**
   * The error the last attempt threw (for `terminal` and `max_deliver`); for `undecodable`, a
   * `CorruptDataError` (`DUETIME_CORRUPT_DATA`) saying why; for a delivery beyond `maxDeliver` whose
   * previous attempt never finished, a `DuetimeError` with code `DUETIME_TIMEOUT`.
   */
  error: unknown;
  /** The decoded payload, or the raw bytes when it was not JSON. */
  payload: unknown;
}

/** Runs a fired message. Throw to have it redelivered after a delay; throw `Terminal()` to dead-letter it. */
export type FiredHandler = (key: string, payload: unknown, firedId: string, info: FiredInfo) => unknown;

/** Called once a fired message will not be retried; the message is terminated after it returns. */
export type DeadLetterHandler = (
  key: string,
  reason: DeadLetterReason,
  deliveries: number,
  info: DeadLetterInfo,
) => unknown;

/** Options of `consumeFired`. */
export interface ConsumeFiredOptions {
  /** Messages handled at once by this process (default 1). */
  concurrency?: number;
  /** Delay before the first redelivery after an error, doubling each time (default 1000 ms). */
  retryDelay?: number;
  /** Longest redelivery delay (default 60 s). */
  maxRetryDelay?: number;
  /** How long the server waits for an ack before redelivering (default 30 s); kept alive while a handler runs. */
  ackWait?: number;
}

/** A running `consumeFired` loop. */
export interface FiredConsumer {
  /** Stops pulling, lets handlers that are running finish, and resolves when they have. */
  stop(): Promise<void>;
  /** Resolves when the loop has ended (after `stop()`, or when the consumer was deleted). */
  readonly closed: Promise<void>;
}

export interface ConsumeContext {
  js: JetStreamClient;
  jsm: JetStreamManager;
  stream: string;
  layout: SubjectLayout;
  logger: Logger;
  /** The scheduler's clock: a message that arrives before its `Duetime-Due` instant waits for it. */
  now?: () => number;
}

const NS_PER_MS = 1_000_000;

/** Creates (or reuses) the durable consumer on the fire subjects and runs `handler` for each fired message. */
export async function consumeFired(
  ctx: ConsumeContext,
  durable: string,
  maxDeliver: number,
  onDeadLetter: DeadLetterHandler,
  handler: FiredHandler,
  options: ConsumeFiredOptions = {},
): Promise<FiredConsumer> {
  positiveInteger('maxDeliver', maxDeliver);
  if (typeof onDeadLetter !== 'function')
    throw new InvalidArgumentError('onDeadLetter', onDeadLetter, 'must be a function');
  if (typeof handler !== 'function') throw new InvalidArgumentError('handler', handler, 'must be a function');
  const concurrency = positiveInteger('options.concurrency', options.concurrency ?? 1);
  const retryDelay = duration('options.retryDelay', options.retryDelay ?? 1_000, {
    allowZero: true,
    max: MAX_TIMER_MS,
  });
  const maxRetryDelay = duration('options.maxRetryDelay', options.maxRetryDelay ?? 60_000, {
    allowZero: true,
    max: MAX_TIMER_MS,
  });
  const ackWait = duration('options.ackWait', options.ackWait ?? 30_000, { max: MAX_TIMER_MS });
  if (ackWait < 1_000) throw new InvalidArgumentError('options.ackWait', ackWait, 'must be at least 1000 ms');

  await ensureDurable(ctx, durable, ackWait);
  let messages: Awaited<ReturnType<Awaited<ReturnType<JetStreamClient['consumers']['get']>>['consume']>>;
  try {
    const consumer = await ctx.js.consumers.get(ctx.stream, durable);
    messages = await consumer.consume({ max_messages: Math.max(16, concurrency * 2) });
  } catch (error) {
    throw toBackendError(`consume durable ${durable} on stream ${ctx.stream}`, error);
  }

  const settings = { maxDeliver, retryDelay, maxRetryDelay, ackWait };
  const now = ctx.now ?? Date.now;
  const keepAliveMs = Math.max(500, Math.floor(ackWait / 3));
  const slots = new Slots(concurrency);
  const tasks = new Set<Promise<void>>();
  const stopping = new AbortController();
  const closed = (async () => {
    try {
      for await (const m of messages) {
        // Fired before its due instant (the scheduler's `fireAheadMs`): it waits, its acknowledgement
        // kept alive, without taking a handler's slot, so messages due sooner are not held up behind it.
        // (At most the longest timer Node.js keeps: only a clock far off could ask for more.)
        const early = Math.min(dueOf(m) - now(), MAX_TIMER_MS);
        const task = (async () => {
          if (early > 0 && !(await hold(m, early, keepAliveMs, stopping.signal, now))) return;
          await slots.take();
          try {
            await handleOne(ctx, m, settings, onDeadLetter, handler);
          } finally {
            slots.give();
          }
        })().finally(() => tasks.delete(task));
        tasks.add(task);
        if (early <= 0) await slots.free();
      }
    } catch (error) {
      ctx.logger.error('jetstream scheduler: consumeFired stopped on an error', { durable, error });
    }
    stopping.abort();
    await Promise.allSettled(tasks);
  })();

  return {
    closed,
    async stop() {
      messages.stop();
      stopping.abort();
      await closed;
    },
  };
}

/** The `Duetime-Due` instant a fired message carries (epoch ms), or -Infinity when it carries none. */
function dueOf(m: JsMsg): number {
  const due = Number(m.headers?.get(H.due) ?? Number.NaN);
  return Number.isFinite(due) ? due : Number.NEGATIVE_INFINITY;
}

/**
 * Keeps `m` until `ms` have passed (its acknowledgement renewed meanwhile). Resolves true when it is due;
 * false when the consumer stopped first: then `m` is given back (`nak`) to be redelivered at its due
 * instant, to whichever process consumes then.
 */
async function hold(
  m: JsMsg,
  ms: number,
  keepAliveMs: number,
  stopping: AbortSignal,
  now: () => number,
): Promise<boolean> {
  if (stopping.aborted) {
    m.nak(ms);
    return false;
  }
  const until = now() + ms;
  const keepAlive = setInterval(() => m.working(), keepAliveMs);
  keepAlive.unref?.();
  const due = await new Promise<boolean>((resolve) => {
    const stopped = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      stopping.removeEventListener('abort', stopped);
      resolve(true);
    }, ms);
    stopping.addEventListener('abort', stopped, { once: true });
  });
  clearInterval(keepAlive);
  if (!due) m.nak(Math.max(0, until - now()));
  return due;
}

/** `count` handler slots: `take` waits for one, `give` returns it, `free` waits until one is free. */
class Slots {
  #free: number;
  readonly #takers: (() => void)[] = [];
  #freed: { promise: Promise<void>; resolve: () => void } | undefined;

  constructor(count: number) {
    this.#free = count;
  }

  take(): Promise<void> {
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#takers.push(resolve));
  }

  give(): void {
    const next = this.#takers.shift();
    if (next) next();
    else {
      this.#free++;
      this.#freed?.resolve();
      this.#freed = undefined;
    }
  }

  /** Resolves once a slot is free and nobody waits for one. */
  async free(): Promise<void> {
    while (this.#free === 0 || this.#takers.length > 0) {
      if (!this.#freed) {
        let resolve!: () => void;
        const promise = new Promise<void>((r) => {
          resolve = r;
        });
        this.#freed = { promise, resolve };
      }
      await this.#freed.promise;
    }
  }
}

async function ensureDurable(ctx: ConsumeContext, durable: string, ackWaitMs: number): Promise<void> {
  const filter = ctx.layout.fireAll;
  try {
    const info = await ctx.jsm.consumers.info(ctx.stream, durable);
    if (info.config.filter_subject !== filter)
      throw new InvalidArgumentError(
        'durable',
        durable,
        `an existing consumer of stream ${ctx.stream} by that name filters ${JSON.stringify(info.config.filter_subject ?? info.config.filter_subjects)}, not ${filter}`,
      );
    return;
  } catch (error) {
    if (!isNotFound(error)) throw toBackendError(`read consumer ${durable}`, error);
  }
  try {
    await ctx.jsm.consumers.add(ctx.stream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: filter,
      ack_wait: ackWaitMs * NS_PER_MS,
      max_deliver: -1,
    });
  } catch (error) {
    throw toBackendError(`create consumer ${durable} on stream ${ctx.stream}`, error);
  }
}

interface Settings {
  maxDeliver: number;
  retryDelay: number;
  maxRetryDelay: number;
  ackWait: number;
}

async function handleOne(
  ctx: ConsumeContext,
  m: JsMsg,
  s: Settings,
  onDeadLetter: DeadLetterHandler,
  handler: FiredHandler,
): Promise<void> {
  const info = describeFired(m);
  const deliveries = info.deliveries;
  const keyToken = m.subject.slice(m.subject.lastIndexOf('.') + 1);
  const key = ctx.layout.keyOfFire(m.subject);
  let payload: unknown;
  let decodeError: string | undefined;
  try {
    payload = m.data.length === 0 ? null : JSON.parse(new TextDecoder().decode(m.data));
  } catch (error) {
    payload = m.data;
    decodeError = `payload is not JSON: ${(error as Error).message}`;
  }
  if (key === undefined) decodeError = `subject ${m.subject} is not a fire subject of this scheduler`;

  const deadLetter = async (reason: DeadLetterReason, error: unknown) => {
    try {
      await onDeadLetter(key ?? keyToken, reason, deliveries, { ...info, error, payload });
      m.term();
    } catch (failure) {
      ctx.logger.error('jetstream scheduler: dead-letter handler failed; the message will be redelivered', {
        firedId: info.firedId,
        error: failure,
      });
      m.nak(delayFor(s, deliveries));
    }
  };

  if (decodeError !== undefined) return deadLetter('undecodable', new CorruptDataError(decodeError));
  if (deliveries > s.maxDeliver)
    return deadLetter(
      'max_deliver',
      new DuetimeError(
        'DUETIME_TIMEOUT',
        `delivery ${deliveries - 1} of ${info.firedId} was not acknowledged within ackWait (the process handling it stopped or stalled)`,
      ),
    );

  const keepAlive = setInterval(() => m.working(), Math.max(500, Math.floor(s.ackWait / 3)));
  keepAlive.unref?.();
  try {
    await handler(key as string, payload, info.firedId, info);
    clearInterval(keepAlive);
    m.ack();
  } catch (error) {
    clearInterval(keepAlive);
    if (isTerminal(error)) return deadLetter('terminal', error);
    if (deliveries >= s.maxDeliver) return deadLetter('max_deliver', error);
    m.nak(delayFor(s, deliveries));
  }
}

function delayFor(s: Settings, deliveries: number): number {
  return Math.min(s.maxRetryDelay, s.retryDelay * 2 ** Math.max(0, deliveries - 1));
}

/** Reads what fired a message from the headers the definition carried. */
export function describeFired(m: JsMsg): FiredInfo {
  const base = { deliveries: m.info.deliveryCount, subject: m.subject, streamSequence: m.seq };
  const h = m.headers;
  const timer = h?.get(H.timer);
  const dueText = h?.get(H.due);
  const dueMs = dueText ? Number(dueText) : Number.NaN;
  if (timer) {
    return {
      ...base,
      firedId: `once:${timer}`,
      kind: 'once',
      ...(Number.isFinite(dueMs) ? { due: new Date(dueMs) } : {}),
    };
  }
  const cronToken = h?.get(H.cron);
  if (cronToken) {
    const name = decodeToken(cronToken) ?? cronToken;
    let due = Number.isFinite(dueMs) ? new Date(dueMs) : undefined;
    if (!due) {
      // Native: the server says when the next tick is; the one that fired is the tick before it.
      const next = Date.parse(h?.get(H.scheduleNext) ?? '');
      if (Number.isFinite(next)) {
        try {
          due = parseCron6(h?.get(H.cronExpr)).prev(new Date(next));
        } catch {
          due = undefined;
        }
      }
    }
    if (due)
      return { ...base, firedId: `cron:${name}@${due.toISOString()}`, kind: 'cron', cronName: name, due };
    return { ...base, firedId: `seq:${m.seq}`, kind: 'cron', cronName: name };
  }
  return { ...base, firedId: `seq:${m.seq}`, kind: 'other' };
}
