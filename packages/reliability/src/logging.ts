import { appendFileSync } from 'node:fs';
import { DuetimeError, type Logger } from '@duetime/core';
import { ApplicationSqlError } from './effects.js';

/**
 * Core's log lines that carry an error thrown by a duetime API call (a store, lease or cursor operation,
 * a processor's transaction): what an application would have caught. A backend's own lines (a pool
 * replacing a dead connection, say) may carry the driver's raw error as context; they are only counted.
 */
const API_FAILURES = new Set([
  'processor failed; will retry',
  'dispatcher scan failed; retrying',
  'could not record a failed delivery; backing off locally',
  'rollback failed',
  'scheduler tick failed; retrying at the next poll',
  'could not ask for leadership; retrying at the next poll',
  'could not read a schedule cursor; retrying at the next poll',
  'could not advance a schedule cursor; will retry',
  'lease renewal failed; retrying while still valid',
  'could not release a lease; it will expire by itself',
  'could not release leadership; it will expire',
  'could not ask for an overlap lease; skipping the occurrence',
  'could not release an overlap lease; it will expire',
]);

/**
 * A logger that keeps count of the errors duetime's APIs threw while faults were injected, and of those
 * that were not typed: every failure must reach the application as a `DuetimeError` with a stable code,
 * never as a driver's own error.
 */
export class ErrorTally implements Logger {
  readonly byCode = new Map<string, number>();
  readonly untyped: string[] = [];
  /** Other warnings and errors logged (by backends, about their connections). */
  logged = 0;
  /** Those, by message. */
  readonly warnings = new Map<string, number>();
  /** Errors of the application's own SQL on `tx.sql` (the driver's, by design). */
  application = 0;

  debug(message: string, fields?: Record<string, unknown>): void {
    trace('debug', message, fields);
  }
  info(message: string, fields?: Record<string, unknown>): void {
    trace('info', message, fields);
  }

  warn(message: string, fields?: Record<string, unknown>): void {
    trace('warn', message, fields);
    if (API_FAILURES.has(message)) this.note(fields?.error, message);
    else {
      this.logged++;
      this.warnings.set(message, (this.warnings.get(message) ?? 0) + 1);
    }
  }

  error(message: string, fields?: Record<string, unknown>): void {
    this.warn(message, fields);
  }

  /** Counts one error (also usable for errors the test catches itself). */
  note(error: unknown, where = 'thrown'): void {
    if (error === undefined) return;
    if (error instanceof ApplicationSqlError) {
      this.application++;
      return;
    }
    if (error instanceof DuetimeError) {
      this.byCode.set(error.code, (this.byCode.get(error.code) ?? 0) + 1);
      return;
    }
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    this.untyped.push(`${where}: ${text}`);
  }

  get untypedCount(): number {
    return this.untyped.length;
  }
}

/** `DUETIME_TRACE_FILE`: every line the components log, appended there with its time (to explain a failing run). */
const TRACE_FILE = process.env.DUETIME_TRACE_FILE;

function trace(level: string, message: string, fields?: Record<string, unknown>): void {
  if (!TRACE_FILE) return;
  let detail = '';
  try {
    detail = fields
      ? JSON.stringify(fields, (_k, v) => (v instanceof Error ? `${v.name}: ${v.message}` : v))
      : '';
  } catch {
    detail = '[fields]';
  }
  appendFileSync(TRACE_FILE, `${new Date().toISOString()} ${level} ${message} ${detail}\n`);
}
