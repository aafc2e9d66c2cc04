import { InvalidArgumentError, type SqlExecutor, type SqlResult } from '@duetime/core';

export type { SqlExecutor, SqlResult };

/**
 * Refuses a handle that is not what a binding expects, before anything is written: an
 * `InvalidArgumentError` naming the argument (`handle`) and what was expected.
 */
export function refuse(handle: unknown, expected: string): never {
  throw new InvalidArgumentError('handle', describe(handle), `must be ${expected}`);
}

/** A short description of a value for an error message (never the whole object). */
function describe(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== 'Object' ? `a ${name}` : 'an object';
}

/** The number a library reports as a count: a number, a bigint, or nothing (then `fallback`). */
export function countOf(value: unknown, fallback: number): number {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'bigint') return Number(value);
  return fallback;
}

/** Rows as plain objects (libraries return arrays with extra fields). */
export function rowsOf(rows: unknown): Record<string, unknown>[] {
  return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
}

/**
 * Rewrites `$1`, `$2`, … as `?` for libraries that bind positional `?` (Knex), repeating a parameter
 * where the statement uses it more than once. A literal `?` in the text is escaped for them.
 */
export function questionMarks(
  text: string,
  params: readonly unknown[],
): { text: string; bindings: unknown[] } {
  const bindings: unknown[] = [];
  const rewritten = text.replace(/\?/g, '\\?').replace(/\$(\d+)/g, (_match, index: string) => {
    const n = Number(index);
    if (n < 1 || n > params.length)
      throw new InvalidArgumentError(
        'text',
        text,
        `refers to $${n} but ${params.length} parameter(s) were given`,
      );
    bindings.push(params[n - 1]);
    return '?';
  });
  return { text: rewritten, bindings };
}

/**
 * Parameters with arrays written as PostgreSQL array literals (`{"a","b"}`), for drivers that would send
 * a JavaScript array as JSON (postgres.js): a statement that casts the parameter (`$1::text[]`) reads
 * the same values whichever driver sent it.
 */
export function arraysAsLiterals(params: readonly unknown[]): unknown[] {
  return params.map((value) => (Array.isArray(value) ? arrayLiteral(value) : value));
}

function arrayLiteral(values: readonly unknown[]): string {
  return `{${values.map(element).join(',')}}`;
}

function element(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) return arrayLiteral(value);
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean')
    return String(value);
  const text =
    value instanceof Date ? value.toISOString() : typeof value === 'string' ? value : JSON.stringify(value);
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}
