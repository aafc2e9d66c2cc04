import { createInterface } from 'node:readline/promises';
import { DuetimeError } from '@duetime/core';

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
 * 0 success; 1 the command ran and found failures (a conformance failure, a handler error in `run`);
 * 2 usage error (unknown command or option, missing argument); 3 invalid input (a bad cron, zone, key,
 * date or URL); 4 the backend failed or could not be reached; 130 interrupted before finishing.
 */
export const EXIT = { ok: 0, failed: 1, usage: 2, invalid: 3, backend: 4, interrupted: 130 } as const;

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
  if (error instanceof DuetimeError) {
    switch (error.code) {
      case 'DUETIME_INVALID_ARGUMENT':
      case 'DUETIME_CRON_SYNTAX':
      case 'DUETIME_INVALID_ZONE':
      case 'DUETIME_DUPLICATE_ID':
        return EXIT.invalid;
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
    const code = error instanceof DuetimeError ? ` [${error.code}]` : '';
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
