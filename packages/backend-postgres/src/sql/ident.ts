/** Quotes an SQL identifier (`my"schema` → `"my""schema"`). */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * An SQL literal for a value inlined into a statement (transactions send their statements with the
 * simple protocol, so BEGIN, buffered writes and the statement itself travel in one round trip).
 * Strings use the escape-string form with backslashes doubled, which is safe whatever
 * `standard_conforming_strings` says; numbers must be finite.
 */
export function literal(value: string | number | null): string {
  if (value === null) return 'NULL';
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`cannot inline ${value} into SQL`);
    return String(value);
  }
  if (value.includes('\u0000')) throw new TypeError('cannot inline a NUL character into SQL');
  return `E'${value.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
}

/** A plain SQL string literal (`it's` → `'it''s'`), for text known to hold no backslash. */
export function quoteLiteral(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}
