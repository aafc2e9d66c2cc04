import { BackendError, CorruptDataError, NotSupportedError } from '../errors.js';
import { readState, type StoredState, withState } from '../store/recurrence.js';
import type { DeadLetterRecord, Event, Message, Schedule } from '../store/types.js';

/**
 * Decoding of stored rows and records into core's types, shared by every backend: a value that is not what
 * duetime wrote is a {@link CorruptDataError} that names where it was found (`where`: a file, a table, a
 * key, a subject), never a raw `SyntaxError` or `TypeError`.
 */

/** A stored schedule's fields as the engine gives them back: instants as epoch ms, Dates or numeric text. */
export interface ScheduleFields {
  key: string;
  at: unknown;
  dueAt: unknown;
  version: unknown;
  attempts: unknown;
  /** The message: JSON text, or an object the engine already parsed. */
  message: unknown;
  lastError?: string | null | undefined;
  /** The stored recurrence: JSON text, an object, or null/undefined for a one-shot schedule. */
  recurrence?: unknown;
}

/** A stored dead letter's fields (see {@link ScheduleFields}). */
export interface DeadLetterFields {
  key: string;
  version: unknown;
  at: unknown;
  message: unknown;
  attempts: unknown;
  error: unknown;
  deadAt: unknown;
}

/**
 * A stored event's fields; `data` is the JSON text as stored, or null/undefined for an event without data
 * (an engine that keeps parsed values passes them through `JSON.stringify`, so that a string or a null
 * the application raised comes back as it was).
 */
export interface EventFields {
  sequence: unknown;
  type: unknown;
  data?: unknown;
  timestamp: unknown;
}

/** Reads a stored schedule; `where` names the store (a file, a schema, a key prefix) in errors. */
export function decodeSchedule(fields: ScheduleFields, where: string): Schedule {
  const what = `${where}: schedule ${JSON.stringify(fields.key)}`;
  const schedule: Schedule = {
    key: fields.key,
    at: instant(fields.at, `${what} (at)`),
    message: message(fields.message, what),
    version: count(fields.version, `${what} (version)`),
    attempts: count(fields.attempts, `${what} (attempts)`),
    dueAt: instant(fields.dueAt, `${what} (due time)`),
  };
  if (fields.lastError !== null && fields.lastError !== undefined) schedule.lastError = fields.lastError;
  if (fields.recurrence !== null && fields.recurrence !== undefined) {
    const place = `the recurrence of ${what}`;
    let state: StoredState;
    try {
      state = readState(json(fields.recurrence, place), place);
    } catch (error) {
      if (error instanceof CorruptDataError) throw error;
      throw new CorruptDataError((error as Error).message, { cause: error });
    }
    withState(schedule, state);
  }
  return schedule;
}

/** Reads a stored dead letter (see {@link decodeSchedule}). */
export function decodeDeadLetter(fields: DeadLetterFields, where: string): DeadLetterRecord {
  const what = `${where}: dead letter ${JSON.stringify(fields.key)}`;
  if (typeof fields.error !== 'string') throw new CorruptDataError(`${what} has no error text`);
  return {
    key: fields.key,
    version: count(fields.version, `${what} (version)`),
    at: instant(fields.at, `${what} (at)`),
    message: message(fields.message, what),
    attempts: count(fields.attempts, `${what} (attempts)`),
    error: fields.error,
    deadAt: instant(fields.deadAt, `${what} (dead at)`),
  };
}

/** Reads a stored event of `aggregateId` (see {@link decodeSchedule}). */
export function decodeEvent(aggregateId: string, fields: EventFields, where: string): Event {
  const sequence = count(fields.sequence, `${where}: an event of ${JSON.stringify(aggregateId)} (sequence)`);
  const what = `${where}: event ${sequence} of ${JSON.stringify(aggregateId)}`;
  if (typeof fields.type !== 'string' || fields.type === '')
    throw new CorruptDataError(`${what} has no type`);
  const event: Event = {
    type: fields.type,
    aggregateId,
    sequence,
    timestamp: instant(fields.timestamp, `${what} (timestamp)`).getTime(),
  };
  if (fields.data !== null && fields.data !== undefined) event.data = json(fields.data, what);
  return event;
}

/** Parses JSON text (a value that is not text is taken as already parsed). */
export function decodeJson(value: unknown, what: string): unknown {
  return json(value, what);
}

function json(value: unknown, what: string): unknown {
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value);
  } catch (error) {
    throw new CorruptDataError(`${what} holds invalid JSON`, { cause: error });
  }
}

function message(value: unknown, what: string): Message {
  const parsed = json(value, `the message of ${what}`);
  if (
    typeof parsed !== 'object' ||
    parsed === null ||
    typeof (parsed as { type?: unknown }).type !== 'string'
  )
    throw new CorruptDataError(`the message of ${what} is not a duetime message`);
  return parsed as Message;
}

function instant(value: unknown, what: string): Date {
  const ms =
    value instanceof Date
      ? value.getTime()
      : typeof value === 'string' && value.trim() !== ''
        ? Number(value)
        : typeof value === 'bigint'
          ? Number(value)
          : value;
  if (typeof ms !== 'number' || !Number.isFinite(ms)) throw new CorruptDataError(`${what} is not an instant`);
  return new Date(ms);
}

function count(value: unknown, what: string): number {
  const n = typeof value === 'string' || typeof value === 'bigint' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0)
    throw new CorruptDataError(`${what} is not a count`);
  return n;
}

/** How {@link checkSchemaVersion} names things in its errors. */
export interface SchemaVersionSpec {
  /** The version this package reads and writes. */
  supported: number;
  /** Where the data lives, e.g. `/srv/app.db` or `schema "duetime" on db:5432`. */
  where: string;
  /** The package, e.g. `@duetime/backend-sqlite`. */
  packageName: string;
  /** Whether an older schema may be migrated now (the backend's `migrate` option). */
  migrate: boolean;
}

/**
 * Checks the schema version a store holds against what this package reads and writes: a newer one is
 * refused (written by a newer duetime: it is never downgraded), an older one is to be migrated, or refused
 * when `migrate` is off. Returns whether migrations must run.
 *
 * @throws {CorruptDataError} for a version that is not a count.
 * @throws {NotSupportedError} for a newer version.
 * @throws {BackendError} for an older version when `migrate` is off.
 */
export function checkSchemaVersion(found: unknown, spec: SchemaVersionSpec): 'current' | 'migrate' {
  const version = count(found, `${spec.where}: the schema version`);
  if (version > spec.supported)
    throw new NotSupportedError(
      `${spec.where} was written by a newer duetime (schema version ${version}; this ${spec.packageName} knows up to ${spec.supported}) and was left untouched: upgrade the package`,
    );
  if (version === spec.supported) return 'current';
  if (!spec.migrate)
    throw new BackendError(
      'open',
      `${spec.where} is at schema version ${version}, this ${spec.packageName} needs ${spec.supported}: open it once with migrate: true (the default), or run the migrations first`,
    );
  return 'migrate';
}
