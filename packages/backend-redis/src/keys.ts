import { InvalidArgumentError } from '@duetime/core';

/** Longest store prefix, in characters. */
export const MAX_PREFIX_LENGTH = 64;

// Printable ASCII without spaces and without braces: braces would break the hash tag, and the prefix is also
// part of connection names, where spaces are not allowed.
const PREFIX = /^[\x21-\x7a\x7c\x7e]+$/;

/** Validates a store prefix and returns it. */
export function storePrefix(value: unknown, field = 'options.prefix'): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(field, value, 'must be a string');
  if (value.length === 0 || value.length > MAX_PREFIX_LENGTH)
    throw new InvalidArgumentError(field, value, `must be 1 to ${MAX_PREFIX_LENGTH} characters`);
  if (!PREFIX.test(value))
    throw new InvalidArgumentError(
      field,
      value,
      'may hold printable ASCII characters only, without spaces, `{` or `}` (it becomes the hash tag `{prefix}`)',
    );
  return value;
}

/**
 * The names of one store's keys. Every key starts with the hash tag `{prefix}`, so all of a store's keys
 * live in one Redis Cluster slot and one Lua script may touch any of them.
 */
export class KeySpace {
  /** `{prefix}:`, the start of every key. */
  readonly base: string;
  /** Hash: schedule key -> `version at dueAt attempts [optional fields] message-JSON` (see codec.ts). */
  readonly schedules: string;
  /** Sorted sets of schedule keys scored by `dueAt` (what deliveries claim from), and by `at`. */
  readonly due: string;
  readonly at: string;
  /** Sorted set of schedule keys, every score 0: key order and literal prefix ranges (ZRANGEBYLEX). */
  readonly index: string;
  /** The store-wide version counter, and the store-wide fencing-token counter of leases (INCR). */
  readonly version: string;
  readonly leaseToken: string;
  /** Pub/sub channel announcing commits that put schedules. */
  readonly channel: string;
  /** Hash: schedule key -> `token version claimedUntil` of the unit that claimed it (server clock, ms). */
  readonly claims: string;
  /** Hash: schedule key -> its dead letter, as JSON; and the dead letters' key index (like `index`). */
  readonly dead: string;
  readonly deadIndex: string;

  constructor(readonly prefix: string) {
    const base = `{${prefix}}:`;
    this.base = base;
    this.schedules = `${base}schedules`;
    this.due = `${base}due`;
    this.at = `${base}at`;
    this.index = `${base}index`;
    this.version = `${base}version`;
    this.leaseToken = `${base}lease-token`;
    this.channel = `${base}changes`;
    this.claims = `${base}claims`;
    this.dead = `${base}dead`;
    this.deadIndex = `${base}dead-index`;
  }

  /** List of an aggregate's events, as JSON, in sequence order. */
  readonly events = (aggregateId: string): string => `${this.base}events:${aggregateId}`;
  /** A lease (`token owner`, expiring) and a calendar cursor (ms, expiring). */
  readonly lease = (key: string): string => `${this.base}lease:${key}`;
  readonly cursor = (key: string): string => `${this.base}cursor:${key}`;
  /** Marks a commit as applied, so a resend of the same commit is recognised. */
  readonly marker = (commitId: string): string => `${this.base}tx:${commitId}`;

  /** Glob pattern matching every key of this store (for tools and tests; `*`, `?`, `[` and `\` escaped). */
  get pattern(): string {
    return `${this.base.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}*`;
  }
}
