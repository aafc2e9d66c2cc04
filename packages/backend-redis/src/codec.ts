import { CorruptDataError, type Event, type Message, type Schedule } from '@duetime/core';

// `version at dueAt attempts message-JSON`: the header the Lua commands read and rewrite without JSON.
const HEADER = /^(\d+) (-?\d+) (-?\d+) (\d+) /;

/** Reads a stored schedule; `where` names the hash, for errors. */
export function decodeSchedule(key: string, value: unknown, where: string): Schedule {
  if (typeof value !== 'string')
    throw new CorruptDataError(`key ${where} has an index entry for ${JSON.stringify(key)} but no schedule`);
  const header = HEADER.exec(value);
  const message = header ? parseJson(value.slice(header[0].length)) : undefined;
  if (!header || !isMessage(message))
    throw new CorruptDataError(`key ${where} field ${JSON.stringify(key)} does not hold a duetime schedule`);
  return {
    key,
    at: new Date(Number(header[2])),
    message,
    version: Number(header[1]),
    attempts: Number(header[4]),
    dueAt: new Date(Number(header[3])),
  };
}

/** Decodes a flat `[key1, value1, key2, value2, ...]` reply into schedules. */
export function decodeSchedulePairs(reply: unknown[], where: string): Schedule[] {
  const out: Schedule[] = [];
  for (let i = 0; i + 1 < reply.length; i += 2)
    out.push(decodeSchedule(String(reply[i]), reply[i + 1], where));
  return out;
}

/** Reads one stored event of the list `where`. */
export function decodeEvent(value: string, where: string): Event {
  const event = parseJson(value);
  if (
    !isMessage(event) ||
    typeof (event as Partial<Event>).sequence !== 'number' ||
    typeof (event as Partial<Event>).timestamp !== 'number'
  )
    throw new CorruptDataError(`key ${where} holds an entry that is not a duetime event`);
  return event as Event;
}

export function encodeEvent(event: Event): string {
  return JSON.stringify(event);
}

export function encodeMessage(message: Message): string {
  return JSON.stringify(message);
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function isMessage(value: unknown): value is Message {
  if (typeof value !== 'object' || value === null) return false;
  const m = value as Record<string, unknown>;
  return typeof m.type === 'string' && typeof m.aggregateId === 'string';
}
