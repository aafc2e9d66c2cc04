import { createInterface } from 'node:readline/promises';
import { MissingPackageError } from './optional.js';

/** Where a command reads and writes; tests pass their own. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** Asks a yes/no question; resolves false when there is no terminal to ask on. */
  confirm(question: string): Promise<boolean>;
  env: Record<string, string | undefined>;
  cwd: string;
  /** Whether stdout is a terminal (progress lines are only drawn on one). */
  isTTY: boolean;
}

export function processIo(): CliIo {
  return {
    out: (text) => process.stdout.write(`${text}\n`),
    err: (text) => process.stderr.write(`${text}\n`),
    async confirm(question) {
      if (!process.stdin.isTTY) return false;
      const rl = createInterface({ input: process.stdin, output: process.stderr });
      try {
        const answer = await rl.question(`${question} [y/N] `);
        return /^y(es)?$/i.test(answer.trim());
      } finally {
        rl.close();
      }
    },
    env: process.env,
    cwd: process.cwd(),
    isTTY: Boolean(process.stdout.isTTY),
  };
}

/**
 * Exit codes (stable, documented in the README):
 * 0 success; 1 the command ran and found failures (a conformance failure, a handler error in `run`, a
 * missing schedule); 2 usage error (unknown command or option, missing argument); 3 invalid input (a bad
 * cron, zone, key, date, URL or module); 4 the backend failed or could not be reached; 5 a package the
 * command needs is not installed; 130 interrupted before finishing.
 */
export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  invalid: 3,
  backend: 4,
  missingPackage: 5,
  interrupted: 130,
} as const;

/**
 * A duetime error, from this copy of `@duetime/core` or another one (a globally installed CLI loading an
 * application's module): judged by its `DUETIME_*` code, since `instanceof` only knows one copy.
 */
export function isDuetimeError(error: unknown): error is Error & { code: string } {
  const code = (error as { code?: unknown } | null)?.code;
  return error instanceof Error && typeof code === 'string' && code.startsWith('DUETIME_');
}

/** A NotFoundError: a store opened to inspect is not there, or a named thing does not exist. */
export function isNotFound(error: unknown): error is Error & { code: 'DUETIME_NOT_FOUND' } {
  return isDuetimeError(error) && error.code === 'DUETIME_NOT_FOUND';
}

/** A mistake in how the command was called. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly command?: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

/** The exit code for an error a command threw. */
export function exitCodeFor(error: unknown): number {
  if (error instanceof UsageError) return EXIT.usage;
  if (error instanceof MissingPackageError) return EXIT.missingPackage;
  if (isDuetimeError(error)) {
    switch (error.code) {
      case 'DUETIME_INVALID_ARGUMENT':
      case 'DUETIME_CRON_SYNTAX':
      case 'DUETIME_INVALID_ZONE':
      case 'DUETIME_DUPLICATE_ID':
        return EXIT.invalid;
      case 'DUETIME_NOT_FOUND':
        return EXIT.failed;
      default:
        return EXIT.backend;
    }
  }
  return EXIT.failed;
}

/** One line describing an error (with its chain of causes when `verbose`). */
export function describeError(error: unknown, verbose: boolean): string {
  if (!(error instanceof Error)) return String(error);
  if (!verbose) {
    const code = isDuetimeError(error) ? ` [${error.code}]` : '';
    return `${error.message}${code}`;
  }
  const parts = [error.stack ?? error.message];
  let cause = error.cause;
  while (cause instanceof Error) {
    parts.push(`caused by: ${cause.stack ?? cause.message}`);
    cause = cause.cause;
  }
  return parts.join('\n');
}

/** Renders rows as an aligned text table. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}
