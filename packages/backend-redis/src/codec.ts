import {
  CorruptDataError,
  type DeadLetterRecord,
  type Event,
  type Message,
  readRecurrence,
  type Schedule,
} from '@duetime/core';

/*
 * A schedule is stored as one hash field, `version at dueAt attempts ` (the header the Lua commands read and
 * rewrite without JSON), then its optional fields, then the message's JSON (which always starts with `{`).
 * An optional field is `<tag><byte length> <content> `, the tag one lowercase letter:
 *   r  the recurrence (core's StoredRecurrence JSON, versioned by its own `v`)
 *   e  the error of the last failed attempt of this version
 * A plain one-shot schedule has none, so its value is what earlier versions wrote. A tag this version does
 * not know was written by a newer one: reading it fails with a CorruptDataError saying so, and the scripts
 * keep it as it is when they rewrite a value.
 */
const HEADER = /^(\d+) (-?\d+) (-?\d+) (\d+) /;
const BRACE = 0x7b;
const SPACE = 0x20;

/** Reads a stored schedule; `where` names the hash, for errors. */
export function decodeSchedule(key: string, value: unknown, where: string): Schedule {
  if (typeof value !== 'string')
    throw new CorruptDataError(`key ${where} has an index entry for ${JSON.stringify(key)} but no schedule`);
  const field = () => `key ${where} field ${JSON.stringify(key)}`;
  const bad = (why = 'does not hold a duetime schedule') => new CorruptDataError(`${field()} ${why}`);
  const header = HEADER.exec(value);
  if (!header) throw bad();
  let rest = value.slice(header[0].length);
  let recurrence: string | undefined;
  let lastError: string | undefined;
  if (rest.length > 0 && rest.charCodeAt(0) !== BRACE) {
    // Optional fields: their lengths are in bytes, so they are read from the UTF-8 bytes.
    const bytes = Buffer.from(rest, 'utf8');
    let pos = 0;
    while (pos < bytes.length && bytes[pos] !== BRACE) {
      const tag = bytes[pos]!;
      let end = pos + 1;
      let length = 0;
      while (end < bytes.length && bytes[end]! >= 0x30 && bytes[end]! <= 0x39 && end - pos <= 9)
        length = length * 10 + (bytes[end++]! - 0x30);
      const start = end + 1;
      if (
        tag < 0x61 ||
        tag > 0x7a ||
        end === pos + 1 ||
        bytes[end] !== SPACE ||
        start + length >= bytes.length ||
        bytes[start + length] !== SPACE
      )
        throw bad();
      const content = bytes.toString('utf8', start, start + length);
      if (tag === 0x72) recurrence = content;
      else if (tag === 0x65) lastError = content;
      else
        throw bad(
          `holds a field (${String.fromCharCode(tag)}) this version of duetime cannot read: it was written by a newer version`,
        );
      pos = start + length + 1;
    }
    rest = bytes.toString('utf8', pos);
  }
  const message = parseJson(rest);
  if (!isMessage(message)) throw bad();
  const schedule: Schedule = {
    key,
    at: new Date(Number(header[2])),
    message,
    version: Number(header[1]),
    attempts: Number(header[4]),
    dueAt: new Date(Number(header[3])),
  };
  if (lastError !== undefined) schedule.lastError = lastError;
  if (recurrence !== undefined) {
    try {
      schedule.recurrence = readRecurrence(parseJson(recurrence), `the recurrence of ${field()}`);
    } catch (error) {
      throw new CorruptDataError((error as Error).message, { cause: error });
    }
  }
  return schedule;
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
    typeof event.aggregateId !== 'string' ||
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

/**
 * A dead letter is stored as JSON, `{"v":1,"version":…,"at":ms,"attempts":…,"error":…,"deadAt":ms,
 * "message":{…}}`, in the dead-letter hash under its key. `v` is the form's version: a later one is refused
 * (it was written by a newer version of duetime) rather than misread.
 */
export function encodeDeadLetter(record: DeadLetterRecord): string {
  return JSON.stringify({
    v: 1,
    version: record.version,
    at: record.at.getTime(),
    attempts: record.attempts,
    error: record.error,
    deadAt: record.deadAt.getTime(),
    message: record.message,
  });
}

/** Reads a stored dead letter; `where` names the hash, for errors. */
export function decodeDeadLetter(key: string, value: unknown, where: string): DeadLetterRecord {
  const field = `key ${where} field ${JSON.stringify(key)}`;
  if (typeof value !== 'string')
    throw new CorruptDataError(
      `key ${where} has an index entry for ${JSON.stringify(key)} but no dead letter`,
    );
  const d = parseJson(value) as Record<string, unknown> | undefined;
  if (typeof d === 'object' && d !== null && typeof d.v === 'number' && d.v > 1)
    throw new CorruptDataError(
      `${field} holds a dead letter of form ${d.v}, which this version of duetime cannot read: it was written by a newer version`,
    );
  if (
    typeof d !== 'object' ||
    d === null ||
    d.v !== 1 ||
    typeof d.version !== 'number' ||
    typeof d.at !== 'number' ||
    typeof d.attempts !== 'number' ||
    typeof d.error !== 'string' ||
    typeof d.deadAt !== 'number' ||
    !isMessage(d.message)
  )
    throw new CorruptDataError(`${field} does not hold a duetime dead letter`);
  return {
    key,
    version: d.version,
    at: new Date(d.at),
    message: d.message,
    attempts: d.attempts,
    error: d.error,
    deadAt: new Date(d.deadAt),
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** A message as stored: a type, and an aggregate id when it has one. */
function isMessage(value: unknown): value is Message {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const m = value as Record<string, unknown>;
  return typeof m.type === 'string' && (m.aggregateId === undefined || typeof m.aggregateId === 'string');
}
