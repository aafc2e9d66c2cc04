/**
 * Every error duetime throws on purpose is a {@link DuetimeError}. Its `code` is stable and meant for
 * programs (`err.code === 'DUETIME_INVALID_ARGUMENT'`); its message is meant for people and may change.
 */
export type DuetimeErrorCode =
  | 'DUETIME_INVALID_ARGUMENT'
  | 'DUETIME_CRON_SYNTAX'
  | 'DUETIME_INVALID_ZONE'
  | 'DUETIME_CONFLICT'
  | 'DUETIME_CLOSED'
  | 'DUETIME_UNKNOWN_EVENT'
  | 'DUETIME_BACKEND'
  | 'DUETIME_CONNECTION'
  | 'DUETIME_CORRUPT_DATA'
  | 'DUETIME_NOT_SUPPORTED'
  | 'DUETIME_LEADERSHIP_LOST'
  | 'DUETIME_TIMEOUT'
  | 'DUETIME_DUPLICATE_ID'
  | 'DUETIME_NOT_FOUND'
  | 'DUETIME_RETRY'
  | 'DUETIME_UNRECOVERABLE'
  | 'DUETIME_INTERRUPTED';

export interface DuetimeErrorOptions {
  cause?: unknown;
}

/** Root of every error duetime throws on purpose. */
export class DuetimeError extends Error {
  readonly code: DuetimeErrorCode;

  constructor(code: DuetimeErrorCode, message: string, options: DuetimeErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.name = new.target.name;
  }
}

/**
 * A value given to duetime is not acceptable. `field` names the option or argument (`key`,
 * `message.type`, `options.retryDelay`), `value` is the offending value as given.
 */
export class InvalidArgumentError extends DuetimeError {
  readonly field: string;
  readonly value: unknown;

  constructor(field: string, value: unknown, reason: string, options: DuetimeErrorOptions = {}) {
    super('DUETIME_INVALID_ARGUMENT', `invalid ${field} ${describeValue(value)}: ${reason}`, options);
    this.field = field;
    this.value = value;
  }
}

/**
 * A cron expression was rejected at parse time. `field` names the cron field (`second`, `minute`, `hour`,
 * `dayOfMonth`, `month`, `dayOfWeek`) or `expression` for the expression as a whole; `value` is the
 * offending text; `reason` says what is wrong with it.
 */
export class CronSyntaxError extends DuetimeError {
  readonly field: string;
  readonly value: unknown;
  readonly reason: string;
  /** The whole expression as given. */
  readonly expression: unknown;

  constructor(
    field: string,
    value: unknown,
    reason: string,
    expression: unknown = value,
    options: DuetimeErrorOptions = {},
  ) {
    const where = field === 'expression' ? '' : ` (${field} ${describeValue(value)})`;
    super(
      'DUETIME_CRON_SYNTAX',
      `invalid cron expression ${describeValue(expression)}${where}: ${reason}`,
      options,
    );
    this.field = field;
    this.value = value;
    this.reason = reason;
    this.expression = expression;
  }
}

/**
 * A time zone is not an IANA zone this runtime knows (`Europe/Berlin`, `UTC`). `field` names the option or
 * argument that held it; `value` is the value as given. `local`, the empty string and offsets are rejected:
 * duetime never falls back to the host's zone.
 */
export class InvalidZoneError extends DuetimeError {
  readonly field: string;
  readonly value: unknown;

  constructor(field: string, value: unknown, reason: string, options: DuetimeErrorOptions = {}) {
    super('DUETIME_INVALID_ZONE', `invalid ${field} ${describeValue(value)}: ${reason}`, options);
    this.field = field;
    this.value = value;
  }
}

/**
 * An optimistic-concurrency check failed at commit: an aggregate gained events, or a schedule being
 * consumed was replaced or consumed by someone else. `store.transact` re-runs the function on aggregate
 * conflicts; a schedule conflict tells the dispatcher that a newer version exists.
 */
export class ConflictError extends DuetimeError {
  readonly kind: ConflictKind;
  readonly subject: string;

  constructor(kind: ConflictKind, subject: string, message?: string, options: DuetimeErrorOptions = {}) {
    super('DUETIME_CONFLICT', message ?? defaultConflictMessage(kind, subject), options);
    this.kind = kind;
    this.subject = subject;
  }
}

/**
 * `aggregate`: the aggregate gained events since it was read (the transaction is re-run).
 * `schedule`: the schedule being consumed was replaced, cancelled or consumed elsewhere (not re-run).
 * `serialization`: the backend aborted the transaction to keep it serializable (re-run).
 * `version`: a schedule the transaction read and changed (paused, resumed, triggered) was changed by
 * someone else before it committed (re-run, so the operation applies to the newer version).
 */
export type ConflictKind = 'aggregate' | 'schedule' | 'serialization' | 'version';

function defaultConflictMessage(kind: ConflictKind, subject: string): string {
  if (kind === 'aggregate') return `aggregate ${JSON.stringify(subject)} changed concurrently`;
  if (kind === 'schedule') return `schedule ${JSON.stringify(subject)} was replaced or consumed concurrently`;
  if (kind === 'version')
    return `schedule ${JSON.stringify(subject)} changed before the transaction committed`;
  return `transaction aborted by the backend to stay serializable (${subject})`;
}

/** The component was closed or stopped and cannot take this call any more. */
export class ClosedError extends DuetimeError {
  constructor(what: string) {
    super('DUETIME_CLOSED', `${what} is closed`);
  }
}

/**
 * A backend failed for a reason other than contention: a lost connection, a refused login, a server
 * error. `operation` says what was being done and, where it helps, against what.
 */
export class BackendError extends DuetimeError {
  readonly operation: string;
  /** True when retrying the same call later may succeed (connection loss, failover, serialization failure). */
  readonly transient: boolean;

  constructor(
    operation: string,
    message: string,
    options: DuetimeErrorOptions & { transient?: boolean } = {},
  ) {
    super('DUETIME_BACKEND', `${operation}: ${message}`, options);
    this.operation = operation;
    this.transient = options.transient ?? false;
  }
}

/** Stored data could not be read back: a foreign or corrupt database, a key of the wrong type. */
export class CorruptDataError extends DuetimeError {
  constructor(message: string, options: DuetimeErrorOptions = {}) {
    super('DUETIME_CORRUPT_DATA', message, options);
  }
}

/** The backend or server cannot do what was asked (a feature missing on this server version, say). */
export class NotSupportedError extends DuetimeError {
  constructor(message: string) {
    super('DUETIME_NOT_SUPPORTED', message);
  }
}

/**
 * What was asked for is not there: a backend opened with `migrate: false` whose store (file, schema,
 * tables, prefix) was never created, or a named item that does not exist. `what` names it as the message
 * does, e.g. `sqlite database /srv/app.db`.
 */
export class NotFoundError extends DuetimeError {
  readonly what: string;

  constructor(what: string, message: string, options: DuetimeErrorOptions = {}) {
    super('DUETIME_NOT_FOUND', message, options);
    this.what = what;
  }
}

/** An event in a stream has no `apply` handler in the aggregate that folds it. */
export class UnknownEventError extends DuetimeError {
  constructor(aggregateType: string, eventType: string) {
    super(
      'DUETIME_UNKNOWN_EVENT',
      `aggregate ${JSON.stringify(aggregateType)} has no apply handler for event type ${JSON.stringify(eventType)}`,
    );
  }
}

/** Short, safe rendering of a value for error messages. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (value === null) return 'null';
  if (typeof value === 'string') {
    const shown = value.length > 80 ? `${value.slice(0, 77)}...` : value;
    return JSON.stringify(shown) + (value.length > 80 ? ` (${value.length} chars)` : '');
  }
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint')
    return String(value);
  if (typeof value === 'symbol') return value.toString();
  // Objects run code when read (getters, Proxy traps, toJSON): whatever they throw, an error message
  // about them must still be built.
  try {
    if (value instanceof Date) return Number.isNaN(value.getTime()) ? 'Invalid Date' : value.toISOString();
    if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`;
    const json = JSON.stringify(value);
    if (json === undefined) return Object.prototype.toString.call(value);
    return json.length > 80 ? `${json.slice(0, 77)}...` : json;
  } catch {
    try {
      return Object.prototype.toString.call(value);
    } catch {
      return typeof value === 'function'
        ? '[a function that cannot be read]'
        : '[an object that cannot be read]';
    }
  }
}

/** Whether an error is one that a retry of the same operation may cure. */
export function isTransient(error: unknown): boolean {
  return error instanceof BackendError && error.transient;
}
