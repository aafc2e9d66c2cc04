import type { Backend, BackendCapabilities } from '../backend.js';
import { type Clock, sleep } from '../clock.js';
import { BackendError, ClosedError, InvalidArgumentError } from '../errors.js';
import { BackendLifecycle, guardCursors, guardLeases } from '../factory/lifecycle.js';
import { type OptionRenames, readFactoryOptions } from '../factory/options.js';
import type { Logger } from '../logger.js';
import { createStore } from '../store/store.js';
import { duration, MAX_TIMER_MS, positiveInteger } from '../validate.js';
import type { CursorBackend, LeaseBackend, StoreAdapter, Unit } from './contract.js';

/**
 * Reads one backend's own options, each named `options.<name>` in errors. Every option the factory
 * received must be read through it: one that is not is refused as unknown (a misspelt option never goes
 * silently unused).
 */
export interface OptionReader {
  /** A duration in ms: finite, positive (or zero with `allowZero`), at most `max` (default: the longest timer). */
  duration(name: string, fallback: number, options?: { allowZero?: boolean; max?: number }): number;
  /** `true` or `false`. */
  boolean(name: string, fallback: boolean): boolean;
  /** An integer within `[min, max]` (default `[1, ∞)`). */
  integer(name: string, fallback: number, options?: { min?: number; max?: number }): number;
  /** One of `values`. */
  oneOf<T extends string>(name: string, values: readonly T[], fallback: T): T;
  /** A string; `check` returns why it is refused, or nothing. */
  string(name: string, fallback: string, check?: (value: string) => string | undefined): string;
  /** The value as given (undefined when absent), for options the backend checks itself (clients, objects). */
  value<T = unknown>(name: string): T | undefined;
}

/** What {@link defineBackend}'s `open` gets. */
export interface OpenContext<Resolved> {
  /** The backend's own options, as its `options` function resolved them. */
  options: Resolved;
  clock: Clock;
  logger: Logger;
  /** `options.connectTimeoutMs` (or the definition's default), when the definition declares one. */
  connectTimeoutMs: number;
  /**
   * Runs `attempt` until it succeeds, within `connectTimeoutMs` of clock time: a failure `retryIf`
   * accepts is tried again after a short, growing pause; running out of time is a transient
   * {@link BackendError} naming `what` (e.g. `redis 127.0.0.1:6379`) and the time waited.
   */
  connect<T>(what: string, attempt: () => Promise<T>, retryIf?: (error: unknown) => boolean): Promise<T>;
  /**
   * Registers clean-up (closing a connection, a timer): run in reverse order when the backend closes, or
   * at once when `open` fails after registering it.
   */
  onClose(cleanUp: () => Promise<void> | void): void;
  /** Throws a {@link ClosedError} once the backend is closing. */
  check(): void;
}

/** What a backend's `open` returns. */
export interface OpenedBackend<Sql, U extends Unit<Sql>, Extra extends object = object> {
  store: StoreAdapter<Sql, U>;
  leases: LeaseBackend;
  cursors: CursorBackend;
  capabilities: BackendCapabilities;
  /** Where the data lives, for messages: e.g. `sqlite backend on /srv/app.db`. */
  describe: string;
  /** Fields added to the backend object (a file name, a schema version, …). */
  extra?: Extra;
}

/** A backend, as {@link defineBackend} takes it. */
export interface BackendDefinition<Target, Resolved, Sql, U extends Unit<Sql>, Extra extends object> {
  /** The backend's short name (`sqlite`, `postgres`, …): `backend.name`, telemetry's `duetime.backend`. */
  name: string;
  /** The factory's name, for messages: `createSqliteBackend`. */
  factory: string;
  /** Options renamed: the old name still works with a deprecation warning (`old → new`). */
  renamed?: OptionRenames;
  /**
   * The default of `options.connectTimeoutMs`, for backends that connect to a server (absent: the backend
   * takes no such option).
   */
  connectTimeoutMs?: number;
  /** Reads and checks the backend's own options (`clock`, `logger` and `connectTimeoutMs` are core's). */
  options?(read: OptionReader): Resolved;
  /** Opens the backend on `target` (checking it first); registers its clean-up with `context.onClose`. */
  open(target: Target, context: OpenContext<Resolved>): Promise<OpenedBackend<Sql, U, Extra>>;
}

/** The options every backend takes. */
export interface CommonBackendOptions {
  /** Stamps events and drives waits (default: the system clock). Tests pass a `ManualClock`. */
  clock?: Clock;
  logger?: Logger;
}

/**
 * Turns a backend definition into its factory: `(target, options) => Promise<Backend>`. Core owns what
 * every backend shares: the options object (`clock`, `logger`, renamed options, unknown ones refused,
 * each checked with a typed error naming it), the connect timeout, the lifecycle (close once, clean-up in
 * reverse order, a `ClosedError` for every call after `close()`), argument and closed-state guards on
 * leases and cursors, and the store over the adapter.
 *
 * @example
 * export const createFileBackend = defineBackend({
 *   name: 'file',
 *   factory: 'createFileBackend',
 *   options: (read) => ({ lockTimeoutMs: read.duration('lockTimeoutMs', 5000) }),
 *   async open(target: { dir: string }, ctx) {
 *     const files = await openFiles(target.dir, ctx.options);
 *     ctx.onClose(() => files.close());
 *     return { store: new FileStore(files), leases: ..., cursors: ..., capabilities: {}, describe: `file backend in ${target.dir}` };
 *   },
 * });
 */
export function defineBackend<
  Target,
  Options extends CommonBackendOptions,
  Resolved,
  Sql,
  U extends Unit<Sql>,
  Extra extends object = object,
>(
  definition: BackendDefinition<Target, Resolved, Sql, U, Extra>,
): (target: Target, options?: Options) => Promise<Backend<Sql> & Extra> {
  return async (target, given) => {
    const opening = prepareBackend(definition, given);
    try {
      return assembleBackend(definition, opening, await definition.open(target, opening.context));
    } catch (error) {
      await opening.abandon();
      throw error;
    }
  };
}

/** A backend being opened: its checked options and context, and its clean-ups so far. */
export interface Opening<Resolved> {
  context: OpenContext<Resolved>;
  lifecycle: BackendLifecycle;
  /** Runs the clean-ups registered so far (open failed). */
  abandon(): Promise<void>;
  /** Runs every clean-up, in reverse order (close). */
  cleanUp(): Promise<void>;
}

/** The first half of {@link defineBackend}: options, context and lifecycle, before the backend's `open`. */
export function prepareBackend<Target, Resolved, Sql, U extends Unit<Sql>, Extra extends object>(
  definition: BackendDefinition<Target, Resolved, Sql, U, Extra>,
  given: CommonBackendOptions | undefined,
): Opening<Resolved> {
  const { options, clock, logger } = readFactoryOptions(given, {
    factory: definition.factory,
    ...(definition.renamed ? { renamed: definition.renamed } : {}),
  });
  const reader = new Reader(options as Record<string, unknown>);
  const connectTimeoutMs =
    definition.connectTimeoutMs === undefined
      ? 0
      : reader.duration('connectTimeoutMs', definition.connectTimeoutMs);
  const resolved = definition.options ? definition.options(reader) : (undefined as Resolved);
  reader.refuseUnread(['clock', 'logger']);
  const lifecycle = new BackendLifecycle(`${definition.name} backend`);
  const cleanUps: (() => Promise<void> | void)[] = [];
  const cleanUp = async () => {
    let first: unknown;
    for (const step of cleanUps.reverse()) {
      try {
        await step();
      } catch (error) {
        first ??= error;
        logger.warn(`${definition.name} backend: clean-up failed`, { error });
      }
    }
    cleanUps.length = 0;
    if (first !== undefined) throw first;
  };
  return {
    lifecycle,
    context: {
      options: resolved,
      clock,
      logger,
      connectTimeoutMs,
      connect: (what, attempt, retryIf) => connectWithin(what, attempt, clock, connectTimeoutMs, retryIf),
      onClose: (step) => void cleanUps.push(step),
      check: () => lifecycle.check(),
    },
    abandon: () => cleanUp().catch(() => {}),
    cleanUp,
  };
}

/** The second half of {@link defineBackend}: the backend object over what `open` returned. */
export function assembleBackend<Target, Resolved, Sql, U extends Unit<Sql>, Extra extends object>(
  definition: BackendDefinition<Target, Resolved, Sql, U, Extra>,
  opening: Opening<Resolved>,
  opened: OpenedBackend<Sql, U, Extra>,
): Backend<Sql> & Extra {
  checkAdapter(opened.store);
  const { lifecycle, context } = opening;
  lifecycle.rename(opened.describe);
  const store = createStore(opened.store, {
    clock: context.clock,
    logger: context.logger,
    name: definition.name,
    check: () => lifecycle.check(),
  });
  const backend: Backend<Sql> = {
    name: definition.name,
    store,
    leases: guardLeases(opened.leases, lifecycle),
    cursors: guardCursors(opened.cursors, lifecycle),
    capabilities: { ...opened.capabilities },
    close: () =>
      lifecycle.close(async () => {
        await store.close();
        await opening.cleanUp();
      }),
  };
  return Object.assign(backend, opened.extra ?? ({} as Extra));
}

/** Refuses an adapter that breaks the contract's pairings (a programming error in the backend). */
function checkAdapter(adapter: StoreAdapter<unknown, Unit<unknown>>): void {
  for (const name of [
    'begin',
    'commit',
    'rollback',
    'loadSchedule',
    'loadEvents',
    'listSchedules',
    'listDeadLetters',
  ])
    if (typeof (adapter as unknown as Record<string, unknown>)[name] !== 'function')
      throw new InvalidArgumentError(`store.${name}`, undefined, 'must be a function (see StoreAdapter)');
  if (adapter.write && !adapter.part)
    throw new InvalidArgumentError(
      'store.part',
      undefined,
      'is required with store.write (interactive adapters)',
    );
  if (adapter.renew) positiveInteger('store.renewEveryMs', adapter.renewEveryMs);
}

/**
 * An {@link OptionReader} over `given`, for functions that take options like a backend's but are no
 * backend (a migration, a coordination client): read every option, then `refuseUnread` the ones nobody
 * read (`what` names the function in the error: `function`, `backend`).
 */
export function optionReader(
  given: Record<string, unknown>,
): OptionReader & { refuseUnread(known: readonly string[], what?: string): void } {
  return new Reader(given);
}

class Reader implements OptionReader {
  readonly #given: Record<string, unknown>;
  readonly #read = new Set<string>();

  constructor(given: Record<string, unknown>) {
    this.#given = given;
  }

  #take(name: string): unknown {
    this.#read.add(name);
    return this.#given[name];
  }

  duration(name: string, fallback: number, options: { allowZero?: boolean; max?: number } = {}): number {
    const value = this.#take(name);
    if (value === undefined) return fallback;
    return duration(`options.${name}`, value, { max: MAX_TIMER_MS, ...options });
  }

  boolean(name: string, fallback: boolean): boolean {
    const value = this.#take(name);
    if (value === undefined) return fallback;
    if (typeof value !== 'boolean')
      throw new InvalidArgumentError(`options.${name}`, value, 'must be true or false');
    return value;
  }

  integer(name: string, fallback: number, options: { min?: number; max?: number } = {}): number {
    const value = this.#take(name);
    if (value === undefined) return fallback;
    const min = options.min ?? 1;
    const max = options.max ?? Number.MAX_SAFE_INTEGER;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
      throw new InvalidArgumentError(
        `options.${name}`,
        value,
        `must be an integer from ${min} to ${max === Number.MAX_SAFE_INTEGER ? 'any size' : max}`,
      );
    return value;
  }

  oneOf<T extends string>(name: string, values: readonly T[], fallback: T): T {
    const value = this.#take(name);
    if (value === undefined) return fallback;
    if (!values.includes(value as T))
      throw new InvalidArgumentError(
        `options.${name}`,
        value,
        `must be one of ${values.map((v) => JSON.stringify(v)).join(', ')}`,
      );
    return value as T;
  }

  string(name: string, fallback: string, check?: (value: string) => string | undefined): string {
    const value = this.#take(name);
    if (value === undefined) return fallback;
    if (typeof value !== 'string')
      throw new InvalidArgumentError(`options.${name}`, value, 'must be a string');
    const reason = check?.(value);
    if (reason !== undefined) throw new InvalidArgumentError(`options.${name}`, value, reason);
    return value;
  }

  value<T = unknown>(name: string): T | undefined {
    return this.#take(name) as T | undefined;
  }

  /** Refuses every given option nobody read. */
  refuseUnread(core: readonly string[], what = 'backend'): void {
    const known = [...core, ...this.#read];
    for (const [name, value] of Object.entries(this.#given)) {
      if (value === undefined || known.includes(name)) continue;
      throw new InvalidArgumentError(
        `options.${name}`,
        value,
        `is not an option of this ${what} (options: ${[...known].sort().join(', ')})`,
      );
    }
  }
}

/** See {@link OpenContext.connect}. */
async function connectWithin<T>(
  what: string,
  attempt: () => Promise<T>,
  clock: Clock,
  timeoutMs: number,
  retryIf: ((error: unknown) => boolean) | undefined,
): Promise<T> {
  const started = clock.now();
  let cancel: (() => void) | undefined;
  const expired = new Promise<'expired'>((resolve) => {
    cancel = clock.setTimer(timeoutMs, () => resolve('expired'));
  });
  const timedOut = (last?: unknown) =>
    new BackendError('connect', `${what} did not answer within ${timeoutMs} ms`, {
      transient: true,
      ...(last !== undefined ? { cause: last } : {}),
    });
  try {
    for (let tries = 1; ; tries++) {
      const running = attempt();
      running.catch(() => {}); // when the timeout wins, a later failure has nobody to tell
      let outcome: { value: T } | 'expired';
      try {
        outcome = await Promise.race([running.then((value) => ({ value })), expired]);
      } catch (error) {
        if (!retryIf?.(error) || error instanceof ClosedError) throw error;
        const left = timeoutMs - (clock.now() - started);
        if (left <= 0) throw timedOut(error);
        await sleep(clock, Math.min(left, 50 * 2 ** Math.min(tries - 1, 4)));
        continue;
      }
      if (outcome === 'expired') throw timedOut();
      return outcome.value;
    }
  } finally {
    cancel?.();
  }
}
