import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import type { Origin } from '../decide/records.js';

/** Which occurrence a handler is running for. */
export interface Invocation {
  /** The schedule (declaration) id. */
  readonly schedule: string;
  /**
   * The occurrence id: the same on every replica and after failover for the same schedule and instant
   * (a hash of namespace, environment, group, schedule id and UTC instant). Use it as an idempotency key.
   */
  readonly occurrence: string;
  /** The instant the occurrence was due. */
  readonly intendedAt: Date;
  readonly origin: Origin;
  /**
   * The leadership epoch (fencing token) this occurrence was admitted under: the group's leadership lease
   * token, larger in every later epoch. Leadership can end while a handler still runs (its signal aborts,
   * but code that ignores the signal goes on); pass the epoch with every write to a system that can keep
   * the largest epoch it has seen and refuse smaller ones, and the writes of a deposed leader are refused
   * once its successor has written. Absent for `runNow` (manual runs are not admitted by a leader and
   * are not fenced).
   */
  readonly epoch?: number;
}

/** What a handler (and each hook) receives. */
export interface HandlerContext {
  /**
   * Aborted when the run must stop: `timeout` elapsed, leadership or the overlap lease was lost, or the
   * scheduler stopped. `signal.reason` says which.
   */
  readonly signal: AbortSignal;
  readonly invocation: Invocation;
}

/** The work a declaration does. Its result is ignored; a rejection or throw marks the run failed. */
export type Handler = (context: HandlerContext) => unknown;

const storage = new AsyncLocalStorage<Invocation>();

/**
 * The invocation whose handler (or hook) is running in the current async context, or `undefined`
 * outside of one. Lets code deep inside a handler tag logs or idempotency keys without threading the
 * context through.
 */
export function currentInvocation(): Invocation | undefined {
  return storage.getStore();
}

/** Runs `fn` with `invocation` as the {@link currentInvocation}. */
export function withInvocation<T>(invocation: Invocation, fn: () => T): T {
  return storage.run(invocation, fn);
}

/** The parts an occurrence id is derived from. */
export interface OccurrenceScope {
  namespace: string;
  environment: string;
  group: string;
}

/**
 * The occurrence id of `schedule` at `instant`: 32 hex characters of SHA-256 over the scope, the
 * schedule id and the UTC instant in milliseconds. Deterministic, so every replica and every epoch
 * derives the same id for the same occurrence. `manualRun` distinguishes `runNow` calls.
 */
export function occurrenceId(
  scope: OccurrenceScope,
  schedule: string,
  instant: number,
  manualRun?: string,
): string {
  const parts = [scope.namespace, scope.environment, scope.group, schedule, instant];
  if (manualRun !== undefined) parts.push(`manual:${manualRun}`);
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 32);
}
