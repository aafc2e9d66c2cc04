/**
 * Header names. `Nats-*` headers are the server's (ADR-51 message schedules, deduplication, rollup);
 * `Duetime-*` headers are this library's own and travel from a definition to the message it fires (the
 * server copies a schedule's other headers verbatim onto what it produces; the emulated pump does the same).
 */
export const H = {
  /** ADR-51: the schedule (`@at <RFC 3339>` or a 6-field cron expression, evaluated in UTC). */
  schedule: 'Nats-Schedule',
  /** ADR-51: where the scheduled message is published (a subject of the same stream). */
  scheduleTarget: 'Nats-Schedule-Target',
  /** ADR-51, on produced messages: the subject that held the schedule. */
  scheduler: 'Nats-Scheduler',
  /** ADR-51, on produced messages: the next instant of a cron schedule, or `purge` for a one-shot. */
  scheduleNext: 'Nats-Schedule-Next',
  /** Replaces the previous message of the same subject (stream `allow_rollup_hdrs`). */
  rollup: 'Nats-Rollup',
  /** Where the emulated pump publishes what a definition fires (a fire subject of the same stream). */
  target: 'Duetime-Target',
  /** Due instant, epoch milliseconds (definitions and fired messages). */
  due: 'Duetime-Due',
  /** One-shot timer: `<key token>.<timer id>` (definitions and fired messages). */
  timer: 'Duetime-Timer',
  /** Cron definition name, encoded as a subject token (definitions and fired messages). */
  cron: 'Duetime-Cron',
  /** Cron expression (definitions and fired messages), so a consumer can tell which tick fired. */
  cronExpr: 'Duetime-Cron-Expr',
} as const;

/** The instants a message schedule can name: RFC 3339 has four-digit years. */
const FIRST_INSTANT = 0;
const LAST_INSTANT = Date.UTC(9999, 11, 31, 23, 59, 59);

/**
 * The `Nats-Schedule` value of a one-shot schedule at `instant` (epoch ms): `@at <RFC 3339>`, an instant
 * before 1970 (fires at once) or after 9999 (never, in practice) clamped to what RFC 3339 can name.
 */
export function atSchedule(instant: number): string {
  return `@at ${new Date(Math.min(LAST_INSTANT, Math.max(FIRST_INSTANT, instant))).toISOString()}`;
}
