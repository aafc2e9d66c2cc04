import { type CronSpec, CronSyntaxError, parseCron } from '@duetime/core';

const FIELD_NAMES = ['second', 'minute', 'hour', 'dayOfMonth', 'month', 'dayOfWeek'] as const;

/**
 * Parses a 6-field cron expression (`second minute hour day-of-month month day-of-week`) evaluated in UTC,
 * limited to what both the library's pump and the server's ADR-51 schedules understand the same way:
 * numbers, names (`JAN`, `MON`), `*`, lists, ranges and steps. Rejected beyond `parseCron`'s own checks:
 * fewer or more than 6 fields, macros (`@hourly`), `L` in day-of-month, and `7` as Sunday (use `0` or `SUN`).
 *
 * @throws {CronSyntaxError} naming the field, the value and the reason.
 */
export function parseCron6(expression: unknown): CronSpec {
  if (typeof expression !== 'string')
    throw new CronSyntaxError('expression', expression, 'must be a string of 6 fields');
  const fields = expression.trim().split(/\s+/);
  if (fields.length !== 6 || fields[0] === '')
    throw new CronSyntaxError(
      'expression',
      expression,
      `must have 6 fields (second minute hour day-of-month month day-of-week), has ${fields[0] === '' ? 0 : fields.length}`,
    );
  const spec = parseCron(expression, 'UTC');
  fields.forEach((text, i) => {
    const field = FIELD_NAMES[i] as string;
    if (/[?#]/.test(text) || (field === 'dayOfMonth' && /[LW]/i.test(text)))
      throw new CronSyntaxError(field, text, 'is not supported by NATS message schedules', expression);
    if (field === 'dayOfWeek') {
      for (const item of text.split(',')) {
        const range = item.split('/')[0] ?? '';
        for (const bound of range.split('-'))
          if (/^\d+$/.test(bound) && Number(bound) > 6)
            throw new CronSyntaxError(field, text, 'day-of-week runs 0-6 (0 is Sunday)', expression);
      }
    }
  });
  return spec;
}
