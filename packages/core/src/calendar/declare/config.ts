import { type Clock, systemClock } from '../../clock.js';
import { InvalidArgumentError } from '../../errors.js';
import { uniqueOwner } from '../../lease/lease-manager.js';
import type { CursorBackend, LeaseBackend } from '../../lease/types.js';
import { defaultLogger, type Logger } from '../../logger.js';
import { resolveTelemetryOption } from '../../telemetry/binding.js';
import type { TelemetryOption } from '../../telemetry/otel.js';
import { duration, identifier, positiveInteger } from '../../validate.js';
import type { ScheduleRecord } from '../decide/records.js';
import { isRegistry, type Registry } from './registry.js';

/** Configuration of a {@link Scheduler}. Only `registry` and `leases` (or `backend`) are required. */
export interface SchedulerConfig {
  /** The declarations to run. */
  registry: Registry;
  /** The backend's leases (leadership and overlap locks). Or pass `backend`. */
  leases?: LeaseBackend;
  /**
   * The backend's cursors: where each schedule's latest decided occurrence is kept, so that restart and
   * failover never replay finished work. Without it, cursors live in memory only and a new leader may
   * re-run occurrences still within `grace`. Taken from `backend` when given.
   */
  cursors?: CursorBackend;
  /** A backend to take `leases` and `cursors` from. */
  backend?: { leases: LeaseBackend; cursors: CursorBackend };
  /** Replicas with the same namespace, environment and group elect one leader (default `default`). */
  group?: string;
  /** Separates applications sharing a backend (default `duetime`). Part of every key and occurrence id. */
  namespace?: string;
  /** This deployment's environment, matched against declarations' `environments` (default `production`). */
  environment?: string;
  /** Time source (default: the system clock). Tests pass a {@link ManualClock}. */
  clock?: Clock;
  /** Handlers running at once (default 16). */
  concurrency?: number;
  /** Records kept in the history (default 1,000). */
  maxHistory?: number;
  /** Occurrences admitted per tick at most (default 1,000); the rest are admitted on the next tick. */
  maxPerTick?: number;
  /** How often a follower tries to become leader, and the longest the leader sleeps (default 1,000 ms). */
  pollInterval?: number;
  /** TTL of the leadership lease (default 10,000 ms); renewed every third of it. Failover takes up to `leadershipTTL + pollInterval`. */
  leadershipTTL?: number;
  /** How late an occurrence may start and still run on time (default 30,000 ms); older ones are `missed` unless caught up. */
  grace?: number;
  /** How long an occurrence waits for a free slot before it is skipped as `capacity_reached` (default 5,000 ms). */
  capacityWait?: number;
  /** How long `drain()` waits for running handlers, holding leadership and overlap leases (default 30,000 ms). */
  drainTimeout?: number;
  /** TTL of cursors (default 90 days): a removed schedule's cursor is forgotten after it. */
  cursorTTL?: number;
  /** This replica's lease owner id (default: host, pid and random bits). */
  owner?: string;
  logger?: Logger;
  /**
   * Early wake-ups: called once with a function that makes the scheduler look again at once (for
   * example on a change notification that leadership may be free). May return an unsubscribe function.
   */
  wake?: (wake: () => void) => (() => void) | undefined;
  /**
   * Whether the application is in maintenance mode: a boolean or a function asked before each
   * occurrence. In maintenance, only declarations with `evenInMaintenanceMode` run; the others are
   * skipped as `filtered` (detail `maintenance`).
   */
  maintenance?: boolean | (() => boolean | Promise<boolean>);
  /**
   * Hears of every record: when an occurrence starts running or is skipped, and again when a running one
   * finishes. Receives a copy; a throw is ignored. For logs and metrics (`duetime run` prints these).
   */
  onRecord?: (record: ScheduleRecord) => void;
  /**
   * OpenTelemetry spans and metrics (see {@link TelemetryOptions}), also used for the trace context its
   * handlers' `tx.schedule` records. Default: what `configureTelemetry()` set, else `@opentelemetry/api`
   * loaded lazily when `run()` starts, if installed, with the global registrations; `false` turns it off.
   */
  telemetry?: TelemetryOption;
}

/** A configuration with its defaults applied. */
export interface ResolvedConfig {
  registry: Registry;
  leases: LeaseBackend;
  cursors: CursorBackend | undefined;
  group: string;
  namespace: string;
  environment: string;
  clock: Clock;
  concurrency: number;
  maxHistory: number;
  maxPerTick: number;
  pollInterval: number;
  leadershipTTL: number;
  grace: number;
  capacityWait: number;
  drainTimeout: number;
  cursorTTL: number;
  owner: string;
  logger: Logger;
  wake: SchedulerConfig['wake'];
  maintenance: () => Promise<boolean>;
  onRecord: ((record: ScheduleRecord) => void) | undefined;
  telemetry: TelemetryOption | undefined;
}

export const SCHEDULER_DEFAULTS = Object.freeze({
  group: 'default',
  namespace: 'duetime',
  environment: 'production',
  concurrency: 16,
  maxHistory: 1000,
  maxPerTick: 1000,
  pollInterval: 1000,
  leadershipTTL: 10_000,
  grace: 30_000,
  capacityWait: 5000,
  drainTimeout: 30_000,
  cursorTTL: 90 * 86_400_000,
});

const NAME_MAX = 100;

function name(field: string, value: unknown): string {
  identifier(field, value);
  const text = value as string;
  if (text.length > NAME_MAX)
    throw new InvalidArgumentError(field, value, `must be at most ${NAME_MAX} characters`);
  return text;
}

/**
 * Validates a scheduler configuration, naming `config.<field>` and the value in errors.
 *
 * @throws {InvalidArgumentError}
 */
export function resolveConfig(config: SchedulerConfig): ResolvedConfig {
  if (typeof config !== 'object' || config === null)
    throw new InvalidArgumentError('config', config, 'must be an object { registry, leases, ... }');
  if (!isRegistry(config.registry))
    throw new InvalidArgumentError(
      'config.registry',
      config.registry,
      'must be a Registry (new Registry(...declarations))',
    );
  const leases = config.leases ?? config.backend?.leases;
  if (
    typeof leases?.acquire !== 'function' ||
    typeof leases?.renew !== 'function' ||
    typeof leases?.release !== 'function'
  )
    throw new InvalidArgumentError(
      'config.leases',
      leases,
      'must be a LeaseBackend (backend.leases), or pass config.backend',
    );
  const cursors = config.cursors ?? config.backend?.cursors;
  if (cursors !== undefined && (typeof cursors.read !== 'function' || typeof cursors.advance !== 'function'))
    throw new InvalidArgumentError('config.cursors', cursors, 'must be a CursorBackend (backend.cursors)');
  const clock = config.clock ?? systemClock;
  if (typeof clock?.now !== 'function' || typeof clock?.setTimer !== 'function')
    throw new InvalidArgumentError('config.clock', clock, 'must be a Clock { now, setTimer }');
  const d = SCHEDULER_DEFAULTS;
  const leadershipTTL = duration('config.leadershipTTL', config.leadershipTTL ?? d.leadershipTTL);
  const grace = duration('config.grace', config.grace ?? d.grace);
  const cursorTTL = duration('config.cursorTTL', config.cursorTTL ?? d.cursorTTL);
  for (const declaration of config.registry) {
    const horizon = Math.max(grace, declaration.options.catchUp?.window ?? 0);
    if (cursorTTL < 2 * horizon)
      throw new InvalidArgumentError(
        'config.cursorTTL',
        cursorTTL,
        `must be at least twice the longest grace or catch-up window (${horizon} ms, schedule ${JSON.stringify(declaration.id)}), or a forgotten cursor could replay work`,
      );
  }
  let maintenance: () => Promise<boolean>;
  const m = config.maintenance;
  if (m === undefined || typeof m === 'boolean') maintenance = async () => m === true;
  else if (typeof m === 'function') maintenance = async () => (await m()) === true;
  else
    throw new InvalidArgumentError('config.maintenance', m, 'must be a boolean or a function () => boolean');
  if (config.wake !== undefined && typeof config.wake !== 'function')
    throw new InvalidArgumentError('config.wake', config.wake, 'must be a function (wake) => unsubscribe');
  const logger = config.logger ?? defaultLogger;
  const telemetry = resolveTelemetryOption(config.telemetry, logger, 'config.telemetry');
  if (config.onRecord !== undefined && typeof config.onRecord !== 'function')
    throw new InvalidArgumentError('config.onRecord', config.onRecord, 'must be a function (record) => void');
  return {
    registry: config.registry,
    leases,
    cursors,
    group: name('config.group', config.group ?? d.group),
    namespace: name('config.namespace', config.namespace ?? d.namespace),
    environment: name('config.environment', config.environment ?? d.environment),
    clock,
    concurrency: positiveInteger('config.concurrency', config.concurrency ?? d.concurrency),
    maxHistory: positiveInteger('config.maxHistory', config.maxHistory ?? d.maxHistory),
    maxPerTick: positiveInteger('config.maxPerTick', config.maxPerTick ?? d.maxPerTick),
    pollInterval: duration('config.pollInterval', config.pollInterval ?? d.pollInterval),
    leadershipTTL,
    grace,
    capacityWait: duration('config.capacityWait', config.capacityWait ?? d.capacityWait, { allowZero: true }),
    drainTimeout: duration('config.drainTimeout', config.drainTimeout ?? d.drainTimeout, { allowZero: true }),
    cursorTTL,
    owner: config.owner === undefined ? uniqueOwner() : name('config.owner', config.owner),
    logger,
    wake: config.wake,
    maintenance,
    onRecord: config.onRecord,
    telemetry,
  };
}
