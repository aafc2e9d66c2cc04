/**
 * An error that must not be retried: a handler throws it (or any error with `terminal === true`) to send
 * the fired message straight to the dead-letter handler.
 */
export class TerminalError extends Error {
  readonly terminal = true as const;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TerminalError';
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

/** Whether `error` asks not to be retried (`error.terminal === true`). */
export function isTerminal(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { terminal?: unknown }).terminal === true;
}
