import { CorruptDataError, type Event, type Message, type Schedule } from '@duetime/core';

export interface ScheduleRow {
  key: string;
  at: number;
  due_at: number;
  version: number;
  attempts: number;
  message: string;
}

export interface EventRow {
  sequence: number;
  type: string;
  data: string | null;
  timestamp: number;
}

export function toSchedule(row: ScheduleRow, file: string): Schedule {
  return {
    key: row.key,
    at: new Date(row.at),
    message: parseJson(row.message, file, `the message of schedule ${JSON.stringify(row.key)}`) as Message,
    version: row.version,
    attempts: row.attempts,
    dueAt: new Date(row.due_at),
  };
}

export function toEvent(aggregateId: string, row: EventRow, file: string): Event {
  const event: Event = { type: row.type, aggregateId, sequence: row.sequence, timestamp: row.timestamp };
  if (row.data !== null)
    event.data = parseJson(
      row.data,
      file,
      `event ${row.sequence} of aggregate ${JSON.stringify(aggregateId)}`,
    );
  return event;
}

function parseJson(text: string, file: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new CorruptDataError(`${file}: ${what} is not valid JSON`, { cause: error });
  }
}
