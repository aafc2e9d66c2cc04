import type { Clock } from '../clock.js';
import { ClosedError, ConflictError, InvalidArgumentError } from '../errors.js';
import { activeTraceNow } from '../telemetry/context.js';
import { identifier, scheduleKey, schedulePrefix, validDate } from '../validate.js';
import type { Aggregate, AggregateContext } from './aggregate.js';
import type { DriverTransaction } from './driver.js';
import { validMessage } from './message.js';
import { isRecurrence, type Recurrence, storeRecurrence } from './recurrence.js';

/** The operations of a driver's unit of work, without ending it (the owner of the unit ends it). */
type TransactionOperations<Sql> = Omit<DriverTransaction<Sql>, 'commit' | 'rollback'>;

import type { Transaction } from './store.js';
import type { Event, Message, Schedule } from './types.js';

/**
 * The {@link Transaction} the application's function (or a processor) gets, over a driver's unit of work:
 * it validates input, folds aggregates and tracks what was scheduled for change notifications. Several
 * may share one driver transaction (a delivery batch gives each processor its own), and `beforeUse` runs
 * before any operation reaches the driver (a delivery takes the processor's savepoint there).
 */
export class CoreTransaction<Sql> implements Transaction<Sql> {
  readonly #driverTx: TransactionOperations<Sql>;
  readonly #clock: Clock;
  readonly #streams = new Map<string, Event[]>();
  #finished = false;
  scheduled = false;
  earliest: number | undefined;

  readonly #beforeUse: (() => void) | undefined;

  constructor(driverTx: TransactionOperations<Sql>, clock: Clock, beforeUse?: () => void) {
    this.#driverTx = driverTx;
    this.#clock = clock;
    this.#beforeUse = beforeUse;
  }

  get sql(): Sql {
    this.#open();
    return this.#driverTx.sql;
  }

  finish(): void {
    this.#finished = true;
  }

  #open(): void {
    if (this.#finished) throw new ClosedError('transaction (it has already committed or rolled back)');
    this.#beforeUse?.();
  }

  async #stream(id: string): Promise<Event[]> {
    let events = this.#streams.get(id);
    if (!events) {
      events = await this.#driverTx.loadEvents(id);
      this.#streams.set(id, events);
    }
    return events;
  }

  async exec<S>(
    agg: Aggregate<S>,
    id: string,
    command: (state: S, ag: AggregateContext<S>) => void | Promise<void>,
  ): Promise<S> {
    this.#open();
    if (typeof agg?.fold !== 'function')
      throw new InvalidArgumentError('aggregate', agg, 'must come from aggregate({...})');
    identifier('aggregateId', id);
    if (typeof command !== 'function')
      throw new InvalidArgumentError('command', command, 'must be a function');
    const stream = await this.#stream(id);
    const base = stream.at(-1)?.sequence ?? 0;
    let state = agg.fold(stream);
    const raised: Event[] = [];
    const clock = this.#clock;
    const ag: AggregateContext<S> = {
      id,
      get state() {
        return state;
      },
      get sequence() {
        return base + raised.length;
      },
      raise(type: string, data?: unknown) {
        identifier('event.type', type);
        if (!agg.handles(type))
          throw new InvalidArgumentError(
            'event.type',
            type,
            `aggregate ${JSON.stringify(agg.type)} has no apply handler for it`,
          );
        const message = validMessage(
          data === undefined ? { type, aggregateId: id } : { type, aggregateId: id, data },
          'event',
        );
        const event: Event = {
          ...message,
          aggregateId: id,
          sequence: base + raised.length + 1,
          timestamp: clock.now(),
        };
        state = agg.apply(state, event);
        raised.push(event);
      },
    };
    await command(state, ag);
    this.#open();
    if (raised.length > 0) {
      await this.#driverTx.appendEvents(id, base, raised);
      stream.push(...raised);
    }
    return state;
  }

  async schedule(key: string, at: Date | Recurrence, message: Message): Promise<void> {
    this.#open();
    scheduleKey(key);
    const copy = validMessage(message);
    const first = isRecurrence(at) ? storeRecurrence(at, this.#clock.now()) : undefined;
    const when = first ? first.at : validDate('at', at);
    if (copy.trace === undefined) {
      // The scheduling transaction's trace context travels in the message to the delivery (a span link).
      let trace = activeTraceNow();
      if (trace instanceof Promise) trace = await trace;
      if (trace !== undefined) copy.trace = trace;
    }
    if (first) await this.#driverTx.putSchedule(key, when, copy, first.stored);
    else await this.#driverTx.putSchedule(key, when, copy);
    this.scheduled = true;
    const t = when.getTime();
    if (this.earliest === undefined || t < this.earliest) this.earliest = t;
  }

  async retryDeadLetter(key: string, options: { at?: Date; asKey?: string } = {}): Promise<boolean> {
    this.#open();
    scheduleKey(key);
    if (typeof options !== 'object' || options === null)
      throw new InvalidArgumentError('options', options, 'must be an object { at?, asKey? }');
    const target = options.asKey === undefined ? key : scheduleKey(options.asKey, 'options.asKey');
    const when = options.at === undefined ? new Date(this.#clock.now()) : validDate('options.at', options.at);
    const dead = await this.#driverTx.loadDeadLetter(key);
    if (!dead) return false;
    if (await this.#driverTx.loadSchedule(target))
      throw new ConflictError(
        'schedule',
        target,
        `schedule ${JSON.stringify(target)} is active; retry the dead letter under another key ({ asKey }) or cancel it first`,
      );
    await this.#driverTx.putSchedule(target, when, dead.message);
    await this.#driverTx.deleteDeadLetter(key);
    this.scheduled = true;
    if (this.earliest === undefined || when.getTime() < this.earliest) this.earliest = when.getTime();
    return true;
  }

  async discardDeadLetter(key: string): Promise<boolean> {
    this.#open();
    return this.#driverTx.deleteDeadLetter(scheduleKey(key));
  }

  async cancelSchedule(key: string): Promise<boolean> {
    this.#open();
    return this.#driverTx.deleteSchedule(scheduleKey(key));
  }

  async cancelSchedulePrefix(prefix: string): Promise<number> {
    this.#open();
    return this.#driverTx.deletePrefix(schedulePrefix(prefix));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    this.#open();
    return this.#driverTx.loadSchedule(scheduleKey(key));
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    this.#open();
    return [...(await this.#stream(identifier('aggregateId', aggregateId)))];
  }
}
