import { InvalidArgumentError, UnknownEventError } from '../errors.js';
import { identifier } from '../validate.js';
import type { Event } from './types.js';

/**
 * How an aggregate's state is folded from its events. Declared once, used by `tx.exec`.
 *
 * @example
 * const order = aggregate({
 *   type: 'order',
 *   initial: { status: 'none' as 'none' | 'pending' | 'paid' | 'expired' },
 *   apply: {
 *     'order.placed': (s) => ({ ...s, status: 'pending' }),
 *     'order.paid': (s) => ({ ...s, status: 'paid' }),
 *   },
 * });
 */
export interface Aggregate<S> {
  readonly type: string;
  /** The state before any event. */
  initial(): S;
  /** Folds one event into the state; throws {@link UnknownEventError} for an event type without a handler. */
  apply(state: S, event: Event): S;
  /** Folds a whole stream. */
  fold(events: readonly Event[]): S;
  /** Whether this aggregate knows the event type. */
  handles(eventType: string): boolean;
}

export interface AggregateDefinition<S> {
  /** A name for errors and descriptions, e.g. `order`. */
  type: string;
  /** The state before any event: a value (cloned for each fold) or a function returning a fresh one. */
  initial: S | (() => S);
  /** One pure function per event type. */
  apply: Record<string, (state: S, event: Event) => S>;
}

/** Declares an aggregate. Validates the definition at once. */
export function aggregate<S>(definition: AggregateDefinition<S>): Aggregate<S> {
  const type = identifier('aggregate.type', definition?.type);
  const handlers = definition.apply;
  if (typeof handlers !== 'object' || handlers === null)
    throw new InvalidArgumentError('aggregate.apply', handlers, 'must be an object of event handlers');
  for (const [eventType, fn] of Object.entries(handlers)) {
    if (typeof fn !== 'function')
      throw new InvalidArgumentError(
        `aggregate.apply.${eventType}`,
        fn,
        'must be a function (state, event) => state',
      );
  }
  const initial = definition.initial;
  const fresh = (): S => (typeof initial === 'function' ? (initial as () => S)() : structuredClone(initial));
  const apply = (state: S, event: Event): S => {
    const handler = Object.hasOwn(handlers, event.type) ? handlers[event.type] : undefined;
    if (!handler) throw new UnknownEventError(type, event.type);
    return handler(state, event);
  };
  return Object.freeze({
    type,
    initial: fresh,
    apply,
    fold: (events: readonly Event[]) => events.reduce(apply, fresh()),
    handles: (eventType: string) => Object.hasOwn(handlers, eventType),
  });
}

/** What a command receives to raise events on the aggregate it runs against. */
export interface AggregateContext<S> {
  /** The aggregate id. */
  readonly id: string;
  /** The state including the events raised so far by this command. */
  readonly state: S;
  /** The stream's last sequence including the events raised so far (0 for a new aggregate). */
  readonly sequence: number;
  /** Raises an event: validated, folded into `state` at once, appended when the transaction commits. */
  raise(type: string, data?: unknown): void;
}
