import type { Clock } from '../clock.js';
import { ClosedError, ConflictError, InvalidArgumentError } from '../errors.js';
import { activeTraceNow } from '../telemetry/context.js';
import { identifier, scheduleKey, schedulePrefix, validDate } from '../validate.js';
import type { Aggregate, AggregateContext } from './aggregate.js';
import { validMessage } from './message.js';
import type { ResumeResult } from './operations.js';
import * as operations from './operations.js';
import { type CatchUp, isRecurrence, type Recurrence, storeRecurrence } from './recurrence.js';
import type { Transaction } from './store.js';
import type { Event, Message, Schedule } from './types.js';
import type { Work } from './work.js';

/**
 * The {@link Transaction} the application's function (or a processor) gets, over a unit's {@link Work}:
 * it validates input, folds aggregates and tracks what was scheduled for change notifications. Several
 * may share one unit (a delivery batch gives each processor its own).
 */
export class CoreTransaction<Sql> implements Transaction<Sql> {
  // biome-ignore lint/suspicious/noExplicitAny: any adapter's unit
  readonly #work: Work<Sql, any>;
  readonly #clock: Clock;
  readonly #streams = new Map<string, Event[]>();
  #finished = false;
  scheduled = false;
  earliest: number | undefined;

  // biome-ignore lint/suspicious/noExplicitAny: any adapter's unit
  constructor(work: Work<Sql, any>, clock: Clock) {
    this.#work = work;
    this.#clock = clock;
  }

  get sql(): Sql {
    this.#open();
    return this.#work.sql;
  }

  finish(): void {
    this.#finished = true;
  }

  #open(): void {
    if (this.#finished) throw new ClosedError('transaction (it has already committed or rolled back)');
  }

  #scheduled(at: Date): void {
    this.scheduled = true;
    const t = at.getTime();
    if (this.earliest === undefined || t < this.earliest) this.earliest = t;
  }

  async #stream(id: string): Promise<Event[]> {
    let events = this.#streams.get(id);
    if (!events) {
      events = await this.#work.loadEvents(id);
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
      this.#work.append({ op: 'append', aggregateId: id, expectedSequence: base, events: raised });
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
    this.#work.put(
      first
        ? { op: 'put', key, at: when, message: copy, recurrence: first.stored }
        : { op: 'put', key, at: when, message: copy },
    );
    this.#scheduled(when);
  }

  async retryDeadLetter(key: string, options: { at?: Date; asKey?: string } = {}): Promise<boolean> {
    this.#open();
    scheduleKey(key);
    if (typeof options !== 'object' || options === null)
      throw new InvalidArgumentError('options', options, 'must be an object { at?, asKey? }');
    const target = options.asKey === undefined ? key : scheduleKey(options.asKey, 'options.asKey');
    const when = options.at === undefined ? new Date(this.#clock.now()) : validDate('options.at', options.at);
    const dead = await this.#work.loadDeadLetter(key);
    if (!dead) return false;
    if (await this.#work.loadSchedule(target))
      throw new ConflictError(
        'schedule',
        target,
        `schedule ${JSON.stringify(target)} is active; retry the dead letter under another key ({ asKey }) or cancel it first`,
      );
    this.#work.put({ op: 'put', key: target, at: when, message: dead.message });
    await this.#work.deleteDead(key);
    this.#scheduled(when);
    return true;
  }

  async discardDeadLetter(key: string): Promise<boolean> {
    this.#open();
    return this.#work.deleteDead(scheduleKey(key));
  }

  async cancelSchedule(key: string): Promise<boolean> {
    this.#open();
    return this.#work.delete(scheduleKey(key));
  }

  async cancelSchedulePrefix(prefix: string): Promise<number> {
    this.#open();
    return this.#work.deletePrefix(schedulePrefix(prefix));
  }

  async loadSchedule(key: string): Promise<Schedule | undefined> {
    this.#open();
    return this.#work.loadSchedule(scheduleKey(key));
  }

  async loadEvents(aggregateId: string): Promise<Event[]> {
    this.#open();
    return [...(await this.#stream(identifier('aggregateId', aggregateId)))];
  }

  async pauseSchedule(key: string, options?: { note?: string }): Promise<boolean> {
    this.#open();
    return operations.pause(this.#work, this.#clock.now(), scheduleKey(key), options);
  }

  async resumeSchedule(key: string, options?: { catchUp?: CatchUp }): Promise<ResumeResult> {
    this.#open();
    const result = await operations.resume(this.#work, this.#clock.now(), scheduleKey(key), options);
    if (result.resumed) this.#scheduled(new Date(this.#clock.now()));
    return result;
  }

  async triggerSchedule(key: string, options?: { at?: Date }): Promise<string> {
    this.#open();
    const id = await operations.trigger(this.#work, this.#clock.now(), scheduleKey(key), options);
    this.#scheduled(options?.at ?? new Date(this.#clock.now()));
    return id;
  }

  async skipNext(key: string, n = 1): Promise<number> {
    this.#open();
    return operations.skip(this.#work, scheduleKey(key), n);
  }

  async backfillSchedule(key: string, range: { from: Date; to: Date }): Promise<Date[]> {
    this.#open();
    const instants = await operations.backfill(this.#work, scheduleKey(key), range);
    if (instants[0]) this.#scheduled(instants[0]);
    return instants;
  }
}
