import {
  CorruptDataError,
  type DeadLetterRecord,
  decodeDeadLetter,
  decodeEvent,
  decodeSchedule,
  type Event,
  isOneShot,
  type Schedule,
  type StoredState,
} from '@duetime/core';

/*
 * A schedule is stored as one hash field, `version at dueAt attempts ` (the header the Lua commands read and
 * rewrite without JSON), then its optional fields, then the message's JSON (which always starts with `{`).
 * An optional field is `<tag><byte length> <content> `, the tag one lowercase letter:
 *   r  a recurrence (core's stored state JSON): the schedule is recurring
 *   s  a one-shot schedule's stored state (an operator's pause, a queued delivery)
 *   e  the error of the last failed attempt of this version
 * The state comes first, so the scripts tell a recurring schedule by its first field alone. A tag this
 * version does not know was written by a newer one: reading it fails with a CorruptDataError saying so.
 */
const HEADER = /^(\d+) (-?\d+) (-?\d+) (\d+) /;
const FIELD = /^([a-z])(\d{1,9}) /;

/** The state's field tag (`r` or `s`) and its JSON, or `''` twice for none. */
export function encodeState(state: StoredState | undefined): [string, string] {
  if (state === undefined) return ['', ''];
  return [isOneShot(state) ? 's' : 'r', JSON.stringify(state)];
}

/**
 * Reads a stored schedule; `where` names the hash, for errors. With `heads`, a value cut to its header (a
 * `heads` list) gives a head without message.
 */
export function decodeStored(key: string, value: unknown, where: string, heads = false): Schedule {
  if (typeof value !== 'string')
    throw new CorruptDataError(`key ${where} has an index entry for ${JSON.stringify(key)} but no schedule`);
  const bad = (why = 'does not hold a duetime schedule') =>
    new CorruptDataError(`key ${where} field ${JSON.stringify(key)} ${why}`);
  const header = HEADER.exec(value);
  if (!header) throw bad();
  const [, version, at, dueAt, attempts] = header;
  const fields = { key, at: +at!, dueAt: +dueAt!, version: +version!, attempts: +attempts! };
  if (heads && value.length === header[0].length)
    return { ...fields, at: new Date(fields.at), dueAt: new Date(fields.dueAt) } as Schedule;
  // Optional fields: their lengths are in bytes, so they are read from the bytes (one character each).
  let rest = Buffer.from(value.slice(header[0].length), 'utf8').toString('latin1');
  const optional: Record<string, string> = {};
  for (let m = FIELD.exec(rest); m; m = FIELD.exec(rest)) {
    const end = m[0].length + Number(m[2]);
    if (rest[end] !== ' ') throw bad();
    if (!'rse'.includes(m[1]!))
      throw bad(
        `holds a field (${m[1]}) this version of duetime cannot read: it was written by a newer version`,
      );
    optional[m[1]!] = Buffer.from(rest.slice(m[0].length, end), 'latin1').toString('utf8');
    rest = rest.slice(end + 1);
  }
  const message = Buffer.from(rest, 'latin1').toString('utf8');
  if (!message.startsWith('{') || parseJson(message) === undefined) throw bad();
  const recurrence = optional.r ?? optional.s;
  return decodeSchedule({ ...fields, message, lastError: optional.e, recurrence }, `key ${where}`);
}

/** Reads one stored event of the list `where`. */
export function decodeStoredEvent(aggregateId: string, value: string, where: string): Event {
  const event = parseJson(value) as Partial<Event> | undefined;
  if (typeof event !== 'object' || event === null)
    throw new CorruptDataError(`key ${where} holds an entry that is not a duetime event`);
  const { sequence, type, timestamp, data } = event;
  const decoded = decodeEvent(
    aggregateId,
    { sequence, type, timestamp, data: data === undefined ? undefined : JSON.stringify(data) },
    `key ${where}`,
  );
  return event.trace ? { ...decoded, trace: event.trace } : decoded;
}

/**
 * A dead letter is stored as JSON, `{"v":1,"version":…,"at":ms,"attempts":…,"error":…,"deadAt":ms,
 * "message":{…}}`, in the dead-letter hash under its key. `v` is the form's version: a later one is refused
 * (it was written by a newer version of duetime) rather than misread.
 */
export function encodeDeadLetter(d: Omit<DeadLetterRecord, 'key'>): string {
  const { version, attempts, error, message } = d;
  return JSON.stringify({
    v: 1,
    version,
    at: d.at.getTime(),
    attempts,
    error,
    deadAt: d.deadAt.getTime(),
    message,
  });
}

/** Reads a stored dead letter; `where` names the hash, for errors. */
export function decodeStoredDeadLetter(key: string, value: unknown, where: string): DeadLetterRecord {
  const field = `key ${where} field ${JSON.stringify(key)}`;
  if (typeof value !== 'string')
    throw new CorruptDataError(
      `key ${where} has an index entry for ${JSON.stringify(key)} but no dead letter`,
    );
  const d = parseJson(value) as Record<string, unknown> | undefined;
  if (typeof d !== 'object' || d === null || typeof d.v !== 'number')
    throw new CorruptDataError(`${field} does not hold a duetime dead letter`);
  if (d.v > 1)
    throw new CorruptDataError(
      `${field} holds a dead letter of form ${d.v}, which this version of duetime cannot read: it was written by a newer version`,
    );
  return decodeDeadLetter({ ...(d as Omit<DeadLetterRecord, 'key'>), key }, field);
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
