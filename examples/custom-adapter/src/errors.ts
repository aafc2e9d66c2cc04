import { BackendError } from '@duetime/core';

/** Whether `error` is a Node.js system error with one of `codes` (`ENOENT`, `EEXIST`, ...). */
export function hasCode(error: unknown, ...codes: string[]): boolean {
  return codes.includes((error as NodeJS.ErrnoException | undefined)?.code ?? '');
}

// Running out of descriptors or space, or a busy file, may pass; a missing directory or a refused
// permission will not.
const TRANSIENT = ['EAGAIN', 'EBUSY', 'EINTR', 'EMFILE', 'ENFILE', 'ENOSPC', 'ETIMEDOUT'];

/**
 * Maps a file-system error to core's {@link BackendError}, naming what was being done and on which path,
 * so the dispatcher and the lease manager treat it as a failure to ask, never as contention.
 */
export function fsError(operation: string, path: string, error: unknown): BackendError {
  if (error instanceof BackendError) return error;
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const reason = error instanceof Error ? error.message : String(error);
  return new BackendError(`${operation} (${path})`, code ? `${code}: ${reason}` : reason, {
    cause: error,
    transient: code !== undefined && TRANSIENT.includes(code),
  });
}
