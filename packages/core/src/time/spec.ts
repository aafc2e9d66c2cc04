/**
 * When something happens: a cron expression in a zone, or a fixed interval. Immutable.
 * Instants are `Date`s; all arithmetic is in UTC or the spec's explicit IANA zone, never the host's.
 */
export interface Spec {
  /** The first occurrence strictly after `after`, or `undefined` when there is none (bounded search). */
  next(after: Date): Date | undefined;
  /** The last occurrence strictly before `before`, or `undefined` when there is none (bounded search). */
  prev(before: Date): Date | undefined;
  /** Occurrences in `[from, to)`, lazily, in order. */
  occurrences(from: Date, to: Date): Iterable<Date>;
  /** The IANA zone the spec is evaluated in (`UTC` for intervals). */
  readonly timeZone: string;
  /** The expression as written (`0 9 * * MON-FRI`, `every 5m`). */
  toString(): string;
  /** A JSON-safe description. */
  describe(): SpecDescription;
}

export interface SpecDescription {
  kind: 'cron' | 'interval';
  expression: string;
  timeZone: string;
  [key: string]: unknown;
}

/** What to do with local times that DST makes disappear (gap) or repeat (overlap). */
export interface DstPolicy {
  /** `skip` (default): a local time that does not exist that day does not fire. `shift`: it fires at the first instant after the gap. */
  gap: 'skip' | 'shift';
  /** `both` (default): a repeated local time fires twice (two UTC instants). `first` / `last`: once. */
  overlap: 'both' | 'first' | 'last';
}

export const DEFAULT_DST_POLICY: DstPolicy = Object.freeze({ gap: 'skip', overlap: 'both' }) as DstPolicy;
