import { CorruptDataError, type Event, type Message, type Schedule } from '@duetime/core';
import type { EventRow } from './sql/events.js';
import type { ScheduleRow } from './sql/schedules.js';

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new CorruptDataError(`${what} holds invalid JSON`, { cause: error });
  }
}

/** A schedules row as the {@link Schedule} core expects (fresh objects every time). */
export function toSchedule(row: ScheduleRow): Schedule {
  return {
    key: row.key,
    at: new Date(row.at_ms),
    message: parseJson(row.message, `schedule ${JSON.stringify(row.key)}`) as Message,
    version: row.version,
    attempts: row.attempts,
    dueAt: new Date(row.due_ms),
  };
}

/** An events row as an {@link Event}; SQL NULL data means the event had none (JSON null is kept). */
export function toEvent(aggregateId: string, row: EventRow): Event {
  const event: Event = { type: row.type, aggregateId, sequence: row.sequence, timestamp: row.ts };
  if (row.data !== null)
    event.data = parseJson(row.data, `event ${row.sequence} of ${JSON.stringify(aggregateId)}`);
  return event;
}
