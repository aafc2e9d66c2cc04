/**
 * Instants cross the wire as text with an explicit UTC offset and come back as epoch milliseconds
 * computed by the server, so neither the session's TimeZone nor the application's global pg type parsers
 * can shift them, and every JavaScript date PostgreSQL can hold round-trips exactly.
 */

/** SQL that reads a `timestamptz` column as epoch milliseconds (int8). */
export function epochMs(column: string): string {
  return `(extract(epoch from ${column}) * 1000)::int8`;
}

/** Formats a Date as a PostgreSQL timestamptz literal (`2026-01-01 09:30:00.250+00`, `… BC` before year 1). */
export function pgTimestamp(date: Date): string {
  const year = date.getUTCFullYear();
  const two = (n: number) => String(n).padStart(2, '0');
  const ms = String(date.getUTCMilliseconds()).padStart(3, '0');
  const time = `${two(date.getUTCHours())}:${two(date.getUTCMinutes())}:${two(date.getUTCSeconds())}.${ms}+00`;
  const day = `${two(date.getUTCMonth() + 1)}-${two(date.getUTCDate())}`;
  // JavaScript counts a year 0 (astronomical numbering); PostgreSQL calls it 1 BC.
  return year > 0
    ? `${String(year).padStart(4, '0')}-${day} ${time}`
    : `${String(1 - year).padStart(4, '0')}-${day} ${time} BC`;
}

/** The earliest instant a PostgreSQL timestamptz holds: 4714-11-24 00:00:00 BC (later JavaScript dates all fit). */
export const PG_MIN_TIME = Date.UTC(-4713, 10, 24);
