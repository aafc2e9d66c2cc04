import { InvalidArgumentError } from './errors.js';
import type { Logger } from './logger.js';

/** A listener of one event: its return value is ignored; a rejected promise is logged like a throw. */
export type Listener<E> = (event: E) => unknown;

/**
 * The listening side of typed events, as the {@link Dispatcher} and the {@link Scheduler} expose them:
 * `on(name, listener)` returns a function that removes the listener again.
 */
export interface Observable<E extends object> {
  /** Calls `listener` for every `name` event until the returned function is called. */
  on<K extends keyof E & string>(name: K, listener: Listener<E[K]>): () => void;
  /** Calls `listener` for the next `name` event only. */
  once<K extends keyof E & string>(name: K, listener: Listener<E[K]>): () => void;
  /** Removes `listener` from `name` (every registration of it). */
  off<K extends keyof E & string>(name: K, listener: Listener<E[K]>): void;
}

/**
 * Typed events for one emitter. Listeners run synchronously, in registration order, after the fact they
 * report (for deliveries: after the batch commit decided each message's fate). A listener that throws or
 * rejects is logged (`warn`) and never disturbs the emitter or the other listeners. Emitting with nobody
 * listening costs one lookup: callers check {@link has} before they build a payload.
 */
export class Emitter<E extends object> implements Observable<E> {
  readonly #names: ReadonlySet<string>;
  readonly #logger: () => Logger;
  readonly #owner: string;
  /** Copy on write, so a listener that adds or removes listeners does not change the round in progress. */
  #listeners = new Map<string, readonly Listener<never>[]>();
  #count = 0;

  /** `names` are the events this emitter knows; `owner` names it in errors and logs. */
  constructor(owner: string, names: readonly (keyof E & string)[], logger: () => Logger) {
    this.#owner = owner;
    this.#names = new Set(names);
    this.#logger = logger;
  }

  on<K extends keyof E & string>(name: K, listener: Listener<E[K]>): () => void {
    this.#check(name, listener);
    this.#listeners.set(name, [...(this.#listeners.get(name) ?? []), listener as Listener<never>]);
    this.#count++;
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      this.#remove(name, listener, true);
    };
  }

  once<K extends keyof E & string>(name: K, listener: Listener<E[K]>): () => void {
    this.#check(name, listener);
    const off = this.on(name, (event) => {
      off();
      return listener(event);
    });
    return off;
  }

  off<K extends keyof E & string>(name: K, listener: Listener<E[K]>): void {
    this.#check(name, listener);
    this.#remove(name, listener, false);
  }

  /** Whether anyone listens to `name` (or, without a name, to anything). */
  has(name?: keyof E & string): boolean {
    if (name === undefined) return this.#count > 0;
    return this.#listeners.has(name);
  }

  /** Calls the listeners of `name` with `event`. Never throws. */
  emit<K extends keyof E & string>(name: K, event: E[K]): void {
    const listeners = this.#listeners.get(name);
    if (!listeners) return;
    for (const listener of listeners) {
      try {
        const result = (listener as Listener<E[K]>)(event);
        if (result instanceof Promise) result.catch((error: unknown) => this.#failed(name, error));
      } catch (error) {
        this.#failed(name, error);
      }
    }
  }

  #failed(name: string, error: unknown): void {
    try {
      this.#logger().warn(`a ${this.#owner} ${name} listener threw; delivery goes on`, {
        event: name,
        error,
      });
    } catch {
      // A logger that throws has nowhere left to report to.
    }
  }

  #remove(name: string, listener: unknown, first: boolean): void {
    const listeners = this.#listeners.get(name);
    if (!listeners) return;
    let kept: Listener<never>[];
    if (first) {
      const at = listeners.indexOf(listener as Listener<never>);
      if (at < 0) return;
      kept = [...listeners.slice(0, at), ...listeners.slice(at + 1)];
    } else kept = listeners.filter((l) => l !== listener);
    this.#count -= listeners.length - kept.length;
    if (kept.length === 0) this.#listeners.delete(name);
    else this.#listeners.set(name, kept);
  }

  #check(name: string, listener: unknown): void {
    if (!this.#names.has(name))
      throw new InvalidArgumentError(
        'event',
        name,
        `is not a ${this.#owner} event (known: ${[...this.#names].join(', ')})`,
      );
    if (typeof listener !== 'function')
      throw new InvalidArgumentError('listener', listener, 'must be a function (event) => void');
  }
}
