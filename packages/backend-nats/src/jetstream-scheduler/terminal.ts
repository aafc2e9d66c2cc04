import { UnrecoverableError } from '@duetime/core';

/**
 * An error that must not be retried: a handler throws it to send the fired message straight to the
 * dead-letter handler. It is core's {@link UnrecoverableError} (a `DuetimeError` with code
 * `DUETIME_UNRECOVERABLE`, the Dispatcher's "give up at once"), marked `terminal: true`.
 */
export class TerminalError extends UnrecoverableError {
  readonly terminal = true as const;

  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, options);
  }
}

/**
 * Marks a failure as terminal: `throw Terminal('order no longer exists')` or `throw Terminal(error)`.
 * The message goes to `onDeadLetter` with reason `terminal`, then is terminated (never redelivered).
 */
export function Terminal(reason: string | Error): TerminalError {
  if (reason instanceof Error) return new TerminalError(reason.message, { cause: reason });
  return new TerminalError(reason);
}

/**
 * Whether `error` asks not to be retried: `error.terminal === true` (a {@link TerminalError}, or any error
 * of your own so marked), or a duetime error with code `DUETIME_UNRECOVERABLE` (core's
 * `UnrecoverableError`, which a handler shared with a `Dispatcher` may throw).
 */
export function isTerminal(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const e = error as { terminal?: unknown; code?: unknown };
  return e.terminal === true || (error instanceof Error && e.code === 'DUETIME_UNRECOVERABLE');
}
