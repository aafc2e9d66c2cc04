import {
  type Clock,
  duration,
  InvalidArgumentError,
  type Logger,
  MAX_TIMER_MS,
  type OptionReader,
  optionReader,
  positiveInteger,
  readFactoryOptions,
} from '@duetime/core';
import { MAX_ATOMIC_BATCH } from './io.js';
import { validPrefix } from './layout.js';
import { DEFAULT_CLAIM_TTL_MS } from './setup.js';

/** The NATS backend's options, and how they are read. */

export interface NatsBackendOptions {
  /**
   * Names this backend's streams (`<prefix>_store`, `<prefix>_lease`) and subjects (`<prefix>.>`).
   * Processes sharing data use the same prefix. 1 to 32 letters, digits, `_` or `-`. Default `duetime`.
   */
  prefix?: string;
  /** Stamps events and runs dispatchers (default: the system clock). Leases use the server's clock. */
  clock?: Clock;
  logger?: Logger;
  /** First connection, when connecting from `servers` (default 5000 ms). */
  connectTimeoutMs?: number;
  /** Each JetStream request (default 5000 ms). */
  requestTimeoutMs?: number;
  /**
   * How long a commit keeps resending its batch through a lost connection before it reports a transient
   * error (default 30000 ms). Resending is safe: a batch the server stored is refused as a duplicate.
   */
  commitTimeoutMs?: number;
  /** Stream storage (default `file`). `memory` does not survive a server restart. */
  storage?: 'file' | 'memory';
  /** Stream replicas in a cluster (default 1). An existing stream with other replicas is refused. */
  replicas?: number;
  /**
   * The most messages the server takes in one atomic batch: what one transaction may write (default
   * 1000, the server's default). Raise it together with the server's own ceiling (NATS 2.12 and later,
   * read at start: `jetstream { limits { batch { max_msgs: N } } }`) to commit larger transactions whole.
   * Set above what the server allows, a larger transaction is refused by the server, nothing written, with
   * a `TransactionTooLargeError` naming the server's limit, which the backend keeps to from then on.
   */
  atomicBatchLimit?: number;
  /**
   * Delivery claims across processes (see the README, "Several dispatcher processes"). Every delivery
   * claims what it runs: the claim is the pending acknowledgement of the schedule's fire on the store's
   * fires consumer, renewed while the processor runs. `{ ttlMs }` sets how long an unrenewed claim lives
   * (the consumer's `ack_wait`; default 30,000 ms, at least 1,000): a delivery whose process died is
   * delivered again that long after its last renewal. On a cluster keep it well above a leader election
   * (several seconds). The modes `'auto'`, `'always'` and `false` of earlier versions are accepted and
   * change nothing.
   */
  claims?: 'auto' | 'always' | false | { mode?: 'auto' | 'always'; ttlMs?: number };
  /**
   * How long before a schedule's due time its timer fires (default 500 ms, 0 to 60,000). The server fires
   * timers on a 250 ms grid while others keep falling due; a delivery holds a fire that came early
   * (claimed, renewed) until its due instant and runs it then, so schedules run on time. Never before due.
   */
  fireAheadMs?: number;
  /**
   * Create the streams when missing (default true). With `false` the backend opens an existing store only
   * and writes nothing while opening: a prefix without a store is a `NotFoundError` (`DUETIME_NOT_FOUND`).
   */
  migrate?: boolean;
  /**
   * Ignored: the store no longer materialises a commit log, so nothing can stall.
   * @deprecated since 0.2; removed in 0.3.
   */
  stallMs?: number;
  /**
   * Ignored: the store keeps no index nodes to cache.
   * @deprecated since 0.2; removed in 0.3.
   */
  nodeCacheBytes?: number;
}

/** The options as read and checked. */
export type Settings = ReturnType<typeof readSettings>;

/** Reads the backend's own options (core reads `clock`, `logger` and `connectTimeoutMs`). */
export function readSettings(read: OptionReader) {
  const timeout = (name: string, fallback: number) => read.integer(name, fallback, { max: MAX_TIMER_MS });
  const deprecated: string[] = [];
  for (const name of ['stallMs', 'nodeCacheBytes']) {
    const value = read.value(name);
    if (value === undefined) continue;
    positiveInteger(`options.${name}`, value);
    deprecated.push(name);
  }
  return {
    // validPrefix throws the error naming options.prefix itself.
    prefix: read.string('prefix', 'duetime', (value) => void validPrefix(value)),
    claims: claimSettings(read.value('claims')),
    migrate: read.boolean('migrate', true),
    requestTimeoutMs: timeout('requestTimeoutMs', 5000),
    commitTimeoutMs: timeout('commitTimeoutMs', 30_000),
    replicas: read.integer('replicas', 1, { max: MAX_TIMER_MS }),
    storage: read.oneOf('storage', ['file', 'memory'], 'file'),
    atomicBatchLimit: read.integer('atomicBatchLimit', MAX_ATOMIC_BATCH, {
      min: MAX_ATOMIC_BATCH,
      max: 1_000_000,
    }),
    fireAheadMs: read.integer('fireAheadMs', 500, { min: 0, max: 60_000 }),
    /** Deprecated options that were given (warned about when the backend opens). */
    deprecated,
  };
}

/**
 * The options of the functions that are no backend (`createNatsCoordination`, `migrateNatsStore`),
 * checked like a backend's: every given option is read, one that is not is refused as unknown.
 */
export function readPlainOptions(
  given: unknown,
  factory: string,
): { settings: Settings; connectTimeoutMs: number; logger: Logger; clock: Clock } {
  const { options, logger, clock } = readFactoryOptions(given as { clock?: Clock; logger?: Logger }, {
    factory,
  });
  const reader = optionReader(options as Record<string, unknown>);
  const connectTimeoutMs = reader.integer('connectTimeoutMs', 5000, { max: MAX_TIMER_MS });
  const settings = readSettings(reader);
  reader.refuseUnread(['clock', 'logger'], 'function');
  return { settings, connectTimeoutMs, logger, clock };
}

/**
 * How deliveries claim schedules: every delivery's claim is a pending acknowledgement of the fires consumer,
 * living `ttlMs` unrenewed (its `ack_wait`). The modes of earlier versions are checked and change nothing.
 */
function claimSettings(value: unknown): { ttlMs: number } {
  const ttl = (ms: unknown) => {
    if (ms === undefined) return DEFAULT_CLAIM_TTL_MS;
    const value = duration('options.claims.ttlMs', positiveInteger('options.claims.ttlMs', ms), {
      max: MAX_TIMER_MS,
    });
    if (value < 1000)
      throw new InvalidArgumentError(
        'options.claims.ttlMs',
        ms,
        'must be at least 1000 (the server counts in seconds)',
      );
    return value;
  };
  if (value === undefined || value === 'auto' || value === 'always' || value === false)
    return { ttlMs: DEFAULT_CLAIM_TTL_MS };
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const { mode, ttlMs, ...rest } = value as { mode?: unknown; ttlMs?: unknown };
    const unknown = Object.keys(rest);
    if (unknown.length > 0)
      throw new InvalidArgumentError(
        `options.claims.${unknown[0]}`,
        (rest as Record<string, unknown>)[unknown[0] as string],
        'is not a claims option (mode, ttlMs)',
      );
    if (mode !== undefined && mode !== 'auto' && mode !== 'always')
      throw new InvalidArgumentError('options.claims.mode', mode, "must be 'auto' or 'always'");
    return { ttlMs: ttl(ttlMs) };
  }
  throw new InvalidArgumentError(
    'options.claims',
    value,
    "must be 'auto', 'always', false or { mode, ttlMs }",
  );
}
