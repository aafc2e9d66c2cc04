import { InvalidArgumentError, identifier, scheduleKey } from '@duetime/core';

/**
 * How the scheduler lays out its subjects and how it turns keys and names into subject tokens.
 *
 * A key or cron name may be any text that `scheduleKey` accepts (1–512 characters of valid Unicode, no
 * control characters). A NATS subject token may not hold `.`, `*`, `>` or whitespace, so every key and
 * name is percent-encoded into one token: the characters `A-Z a-z 0-9 - _ / : = @ + , ~ !` stay as they
 * are, every other character becomes `%HH` per UTF-8 byte (upper-case hex), `%` itself included. The
 * encoding is injective, so two keys never share a subject, and reversible (`decodeToken`).
 */

/** Characters kept as they are in a token; everything else is percent-encoded. */
const PLAIN = /^[A-Za-z0-9\-_/:=@+,~!]$/;
/** Longest encoded token: keeps a subject well under the server's 4 KiB control line. */
export const MAX_TOKEN_LENGTH = 1024;
/** A prefix is one or more dot-separated tokens of letters, digits, `-` and `_`. */
const PREFIX = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;
/** A stream name: letters, digits, `-` and `_`. */
const STREAM = /^[A-Za-z0-9_-]+$/;

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder('utf-8', { fatal: true });

/** Percent-encodes text into one subject token (see the module comment). */
export function encodeToken(text: string): string {
  let out = '';
  for (const ch of text) {
    if (PLAIN.test(ch)) {
      out += ch;
      continue;
    }
    for (const byte of utf8.encode(ch)) out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** Reverses {@link encodeToken}; returns undefined for a token that no key encodes to. */
export function decodeToken(token: string): string | undefined {
  const bytes: number[] = [];
  for (let i = 0; i < token.length; ) {
    const ch = token[i] as string;
    if (ch === '%') {
      const hex = token.slice(i + 1, i + 3);
      if (!/^[0-9A-F]{2}$/.test(hex)) return undefined;
      bytes.push(Number.parseInt(hex, 16));
      i += 3;
    } else {
      if (!PLAIN.test(ch)) return undefined;
      bytes.push(ch.charCodeAt(0));
      i += 1;
    }
  }
  try {
    return utf8Strict.decode(new Uint8Array(bytes));
  } catch {
    return undefined;
  }
}

/** Validates a key or name and returns its token; throws {@link InvalidArgumentError} naming `field`. */
export function tokenFor(field: string, value: unknown, kind: 'key' | 'name'): string {
  const text = kind === 'key' ? scheduleKey(value as string, field) : identifier(field, value);
  const token = encodeToken(text);
  if (token.length > MAX_TOKEN_LENGTH)
    throw new InvalidArgumentError(
      field,
      value,
      `encodes to a subject token of ${token.length} characters, more than ${MAX_TOKEN_LENGTH} (non-ASCII characters take 3 per UTF-8 byte)`,
    );
  return token;
}

/** Validates the subject prefix (`duetime`, `app.jobs`). */
export function validPrefix(value: unknown): string {
  if (typeof value !== 'string' || !PREFIX.test(value) || value.length > 200)
    throw new InvalidArgumentError(
      'options.prefix',
      value,
      'must be 1-200 characters: dot-separated tokens of letters, digits, "-" and "_"',
    );
  return value;
}

/** Validates a stream or durable consumer name given as `field`. */
export function validName(field: string, value: unknown): string {
  if (typeof value !== 'string' || !STREAM.test(value) || value.length > 200)
    throw new InvalidArgumentError(field, value, 'must be 1-200 letters, digits, "-" or "_"');
  return value;
}

/** Every subject the scheduler uses under one prefix. */
export class SubjectLayout {
  readonly prefix: string;
  /** One-shot definitions: `<prefix>.sched.once.<key>.<timer id>` (one subject per timer). */
  readonly onceAll: string;
  /** Cron definitions: `<prefix>.sched.cron.<name>` (one subject per name: a new one replaces the old). */
  readonly cronAll: string;
  /** Fired deliveries: `<prefix>.sched.fire.<key>`. */
  readonly fireAll: string;
  /** The emulated pump's lease: `<prefix>.sched.lease` (one message, rolled up on every write). */
  readonly lease: string;
  /** The server-clock probe the lease is judged by: `<prefix>.sched.clock` (one message, rolled up). */
  readonly clock: string;

  constructor(prefix: string) {
    this.prefix = prefix;
    this.onceAll = `${prefix}.sched.once.*.*`;
    this.cronAll = `${prefix}.sched.cron.*`;
    this.fireAll = `${prefix}.sched.fire.*`;
    this.lease = `${prefix}.sched.lease`;
    this.clock = `${prefix}.sched.clock`;
  }

  /** The stream's subjects. */
  get streamSubjects(): string[] {
    return [this.onceAll, this.cronAll, this.fireAll, this.lease, this.clock];
  }

  once(keyToken: string, timerId: string): string {
    return `${this.prefix}.sched.once.${keyToken}.${timerId}`;
  }

  onceForKey(keyToken: string): string {
    return `${this.prefix}.sched.once.${keyToken}.*`;
  }

  cron(nameToken: string): string {
    return `${this.prefix}.sched.cron.${nameToken}`;
  }

  fire(keyToken: string): string {
    return `${this.prefix}.sched.fire.${keyToken}`;
  }

  /** The key of a fire subject, or undefined when the subject is not one of this layout's fire subjects. */
  keyOfFire(subject: string): string | undefined {
    const head = `${this.prefix}.sched.fire.`;
    if (!subject.startsWith(head)) return undefined;
    const token = subject.slice(head.length);
    if (token.includes('.')) return undefined;
    return decodeToken(token);
  }
}

/** The default stream name for a prefix: `app.jobs` → `app_jobs_sched`. */
export function defaultStreamName(prefix: string): string {
  return `${prefix.replace(/\./g, '_')}_sched`;
}
