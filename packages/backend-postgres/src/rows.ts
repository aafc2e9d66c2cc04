import {
  CorruptDataError,
  type DeadLetterRecord,
  type Event,
  type Message,
  readRecurrence,
  type Schedule,
} from '@duetime/core';
import type { DeadLetterRow } from './sql/dead-letters.js';
import type { EventRow } from './sql/events.js';
import type { ScheduleRow } from './sql/schedules.js';

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new CorruptDataError(`${what} holds invalid JSON`, { cause: error });
  }
}

/**
 * A schedules row as the {@link Schedule} core expects (fresh objects every time): `lastError` when an
 * attempt failed, `recurrence` on a recurring schedule, both absent otherwise.
 */
export function toSchedule(row: ScheduleRow): Schedule {
  const what = `schedule ${JSON.stringify(row.key)}`;
  const schedule: Schedule = {
    key: row.key,
    at: new Date(row.at_ms),
    message: parseJson(row.message, what) as Message,
    version: row.version,
    attempts: row.attempts,
    dueAt: new Date(row.due_ms),
  };
  if (row.last_error !== null && row.last_error !== undefined) schedule.lastError = row.last_error;
  if (row.recurrence !== null && row.recurrence !== undefined) {
    const where = `the recurrence of ${what}`;
    try {
      schedule.recurrence = readRecurrence(parseJson(row.recurrence, where), where);
    } catch (error) {
      if (error instanceof CorruptDataError) throw error;
      throw new CorruptDataError((error as Error).message, { cause: error });
    }
  }
  return schedule;
}

/** A dead_letters row as a {@link DeadLetterRecord}. */
export function toDeadLetter(row: DeadLetterRow): DeadLetterRecord {
  return {
    key: row.key,
    version: row.version,
    at: new Date(row.at_ms),
    message: parseJson(row.message, `dead letter ${JSON.stringify(row.key)}`) as Message,
    attempts: row.attempts,
    error: row.error,
    deadAt: new Date(row.dead_ms),
  };
}

/** An events row as an {@link Event}; SQL NULL data means the event had none (JSON null is kept). */
export function toEvent(aggregateId: string, row: EventRow): Event {
  const event: Event = { type: row.type, aggregateId, sequence: row.sequence, timestamp: row.ts };
  if (row.data !== null)
    event.data = parseJson(row.data, `event ${row.sequence} of ${JSON.stringify(aggregateId)}`);
  return event;
}
