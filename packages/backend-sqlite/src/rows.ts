import {
  CorruptDataError,
  type DeadLetterRecord,
  type Event,
  type Message,
  readRecurrence,
  type Schedule,
} from '@duetime/core';

export interface ScheduleRow {
  key: string;
  at: number;
  due_at: number;
  version: number;
  attempts: number;
  message: string;
  last_error: string | null;
  recurrence: string | null;
}

export interface DeadLetterRow {
  key: string;
  version: number;
  at: number;
  message: string;
  attempts: number;
  error: string;
  dead_at: number;
}

export interface EventRow {
  sequence: number;
  type: string;
  data: string | null;
  timestamp: number;
}

export function toSchedule(row: ScheduleRow, file: string): Schedule {
  const what = `schedule ${JSON.stringify(row.key)}`;
  const schedule: Schedule = {
    key: row.key,
    at: new Date(row.at),
    message: parseJson(row.message, file, `the message of ${what}`) as Message,
    version: row.version,
    attempts: row.attempts,
    dueAt: new Date(row.due_at),
  };
  if (row.last_error !== null && row.last_error !== undefined) schedule.lastError = row.last_error;
  if (row.recurrence !== null && row.recurrence !== undefined) {
    const value = parseJson(row.recurrence, file, `the recurrence of ${what}`);
    try {
      schedule.recurrence = readRecurrence(value, `the recurrence of ${what}`);
    } catch (error) {
      throw new CorruptDataError(`${file}: ${(error as Error).message}`, { cause: error });
    }
  }
  return schedule;
}

export function toDeadLetter(row: DeadLetterRow, file: string): DeadLetterRecord {
  return {
    key: row.key,
    version: row.version,
    at: new Date(row.at),
    message: parseJson(row.message, file, `the message of dead letter ${JSON.stringify(row.key)}`) as Message,
    attempts: row.attempts,
    error: row.error,
    deadAt: new Date(row.dead_at),
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
