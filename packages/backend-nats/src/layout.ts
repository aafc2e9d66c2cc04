import { createHash } from 'node:crypto';
import { InvalidArgumentError } from '@duetime/core';

const PREFIX = /^[A-Za-z0-9_-]{1,32}$/;

/** Checks the `prefix` option: 1 to 32 letters, digits, `_` or `-` (it names streams and subjects). */
export function validPrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || !PREFIX.test(prefix))
    throw new InvalidArgumentError(
      'options.prefix',
      prefix,
      'must be 1 to 32 letters, digits, "_" or "-" (it names JetStream streams and subjects)',
    );
  return prefix;
}

/** A subject token for arbitrary text: base64url of its SHA-256 (43 characters). Used for lease keys. */
export function token(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('base64url');
}

const PLAIN = /^[A-Za-z0-9_-]+$/;

/**
 * One segment of a key as a subject token, reversibly: letters, digits, `_` and `-` stay as they are;
 * anything else becomes `~` followed by the base64url of its UTF-8 bytes (`~` alone is the empty segment).
 */
export function segmentToken(segment: string): string {
  if (PLAIN.test(segment)) return segment;
  return `~${Buffer.from(segment, 'utf8').toString('base64url')}`;
}

export function tokenSegment(token: string): string {
  if (!token.startsWith('~')) return token;
  return Buffer.from(token.slice(1), 'base64url').toString('utf8');
}

/** A key as subject tokens: one per `/`-separated segment (`order/ORD-1/expire` → `order.ORD-1.expire`). */
export function keyTokens(key: string): string {
  return key.split('/').map(segmentToken).join('.');
}

export function tokensKey(tokens: string): string {
  return tokens.split('.').map(tokenSegment).join('/');
}

/**
 * A subject filter for the keys under a literal prefix: its whole segments become literal tokens and the
 * rest a wildcard, so the server narrows the search and the caller checks `startsWith` (`a/b/` and `a/bc`
 * both look under `a.`; `a/b/` matches every key with more segments, the empty one included).
 */
function prefixFilter(base: string, prefix: string): string {
  const segments = prefix.split('/');
  segments.pop();
  return segments.length > 0 ? `${base}.${segments.map(segmentToken).join('.')}.>` : `${base}.>`;
}

/**
 * Where a backend keeps its data on the server: two streams named from the prefix, and the subjects
 * inside them.
 *
 * - `<prefix>_store` holds the transactional store, one subject per thing, so that every write is a
 *   JetStream primitive: a schedule's record (`s.<key>`), its timer (`t.<key>`, a JetStream message
 *   schedule), what the timer fires (`f.<key>`, read by one durable consumer whose pending
 *   acknowledgements are the deliveries' claims), aggregates' events (`e.<aggregate>.<sequence>`), dead
 *   letters (`x.<key>`) and the store's format record (`meta`). See docs/design.md.
 * - `<prefix>_lease` holds leases, calendar cursors and the server-clock probe.
 *
 * Schedule keys keep their `/`-separated structure as subject tokens (so a key prefix of whole segments is
 * a subject filter); see {@link keyTokens}.
 */
export function layout(prefix: string) {
  const p = validPrefix(prefix);
  const s = `${p}.s`;
  const x = `${p}.x`;
  return {
    prefix: p,
    /** The transactional store. */
    storeStream: `${p}_store`,
    /** Leases, cursors and the server-clock probe. */
    leaseStream: `${p}_lease`,
    /** The store stream's subjects, in the order its configuration lists them. */
    storeSubjects: [
      `${p}.s.>`,
      `${p}.t.>`,
      `${p}.f.>`,
      `${p}.e.>`,
      `${p}.x.>`,
      `${p}.meta`,
      `${p}.d`,
    ] as readonly string[],
    /** The store's format record: written once, never purged, so the stream is never empty. */
    meta: `${p}.meta`,
    /**
     * Commit markers: one per atomic batch, carrying its `Nats-Msg-Id`, kept for the duplicate window
     * (`Nats-TTL`) so that a retried batch is known as stored even across a server restart.
     */
    commits: `${p}.d`,
    /** A schedule's record. */
    record: (key: string) => `${s}.${keyTokens(key)}`,
    /** A filter matching the records whose keys may start with `prefix` (a superset: check the keys). */
    recordFilter: (prefix: string) => prefixFilter(s, prefix),
    /** The key of a record subject. */
    keyOfRecord: (subject: string) => tokensKey(subject.slice(s.length + 1)),
    /** A schedule's timer: a message schedule firing into `fire(key)` at the schedule's due time. */
    timer: (key: string) => `${p}.t.${keyTokens(key)}`,
    /** Where a schedule's timer fires. */
    fire: (key: string) => `${p}.f.${keyTokens(key)}`,
    /** The key of a fire subject. */
    keyOfFire: (subject: string) => tokensKey(subject.slice(p.length + 3)),
    /** Every fire subject: the filter of the fires consumer. */
    fires: `${p}.f.>`,
    /** The durable consumer of the fires: its pending acknowledgements are the deliveries' claims. */
    firesConsumer: `${p}_fires`,
    /** Subjects of the earlier layout (store format 1: a due index and claim markers of its own). */
    format1Subjects: [`${p}.q.>`, `${p}.h.>`, `${p}.c.>`] as readonly string[],
    /** An aggregate's event with `sequence` (1-based). */
    event: (id: string, sequence: number) => `${p}.e.${segmentToken(id)}.${sequence}`,
    /** All events of an aggregate. */
    events: (id: string) => `${p}.e.${segmentToken(id)}.*`,
    deadLetter: (key: string) => `${x}.${keyTokens(key)}`,
    deadLetterFilter: (prefix: string) => prefixFilter(x, prefix),
    keyOfDeadLetter: (subject: string) => tokensKey(subject.slice(x.length + 1)),
    lease: (key: string) => `${p}.lease.l.${token(key)}`,
    cursor: (key: string) => `${p}.lease.c.${token(key)}`,
    clock: `${p}.lease.clock`,
    /**
     * A message of the lease stream that is never purged: a stream that purges empty restarts its
     * sequence at 0 when a NATS 2.9 server crashes, which would reuse fencing tokens.
     */
    leaseAnchor: `${p}.lease.anchor`,
    /** Streams of the earlier store format (a commit log applied to materialised state). */
    legacyStreams: { log: `${p}_log`, state: `${p}_state` },
  };
}

/** The subjects and streams of a prefix (see {@link layout}). */
export type Layout = ReturnType<typeof layout>;
