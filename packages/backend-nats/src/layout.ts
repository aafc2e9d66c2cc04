import { createHash } from 'node:crypto';
import { InvalidArgumentError } from '@duetime/core';

/**
 * Where a backend keeps its data on the server: three streams named from the prefix, and the subjects
 * inside them. Keys, aggregate ids and lease keys become subject tokens through a SHA-256 hash (the
 * original text is stored in the value), so any Unicode key is a valid, fixed-length token.
 */
export interface Layout {
  readonly prefix: string;
  /** The commit log: one message per transaction (its single commit point). */
  readonly logStream: string;
  /** Materialised state: records, events, index nodes, the meta record; written as one chain. */
  readonly stateStream: string;
  /** Leases, cursors and the server-clock probe. */
  readonly leaseStream: string;
  /** Subject of commit messages. */
  readonly logCommit: string;
  /** Subject of the parts of a commit too large for one message. */
  readonly logPart: string;
  /**
   * Subjects of one message each that is never purged, in the log and lease streams: a stream that a
   * filtered purge empties restarts its sequence at 0 when a NATS 2.9 server crashes, which would
   * reuse commit-log sequences and fencing tokens. (The state stream keeps its chain head instead.)
   */
  readonly logAnchor: string;
  readonly leaseAnchor: string;
  /** Core-NATS subject (not stored) announcing commits that put schedules. */
  readonly wake: string;
  readonly stateSubjects: string;
  /**
   * The chain's head: each plan publishes its header here first and its meta record last, so the last
   * message on this subject says at once whether a plan is open and what the applied state is.
   */
  readonly head: string;
  record(key: string): string;
  aggregate(aggregateId: string): string;
  event(aggregateId: string, sequence: number): string;
  node(id: number): string;
  abort(logSeq: number): string;
  lease(key: string): string;
  cursor(key: string): string;
  readonly clock: string;
}

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

/** A subject token for arbitrary text: base64url of its SHA-256 (43 characters). */
export function token(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('base64url');
}

export function layout(prefix: string): Layout {
  const p = validPrefix(prefix);
  const st = `${p}.st`;
  return {
    prefix: p,
    logStream: `${p}_log`,
    stateStream: `${p}_state`,
    leaseStream: `${p}_lease`,
    logCommit: `${p}.log.c`,
    logPart: `${p}.log.p`,
    logAnchor: `${p}.log.anchor`,
    leaseAnchor: `${p}.lease.anchor`,
    wake: `${p}.wake`,
    stateSubjects: `${st}.>`,
    head: `${st}.head`,
    record: (key) => `${st}.rec.${token(key)}`,
    aggregate: (id) => `${st}.agg.${token(id)}`,
    event: (id, sequence) => `${st}.ev.${token(id)}.${sequence}`,
    node: (id) => `${st}.node.${id.toString(36)}`,
    abort: (logSeq) => `${st}.abort.${logSeq}`,
    lease: (key) => `${p}.lease.l.${token(key)}`,
    cursor: (key) => `${p}.lease.c.${token(key)}`,
    clock: `${p}.lease.clock`,
  };
}
