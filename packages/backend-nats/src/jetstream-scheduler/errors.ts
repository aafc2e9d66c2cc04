import { BackendError, DuetimeError } from '@duetime/core';

import {
  apiCode,
  isConnectionLevelError,
  isWrongLastSequence,
  JS_MESSAGE_NOT_FOUND,
  JS_STREAM_NOT_FOUND,
} from '../errors.js';

export { apiCode, isWrongLastSequence };
export const JS_CONSUMER_NOT_FOUND = 10014;
export const JS_SCHEDULE_PATTERN_INVALID = 10189;
/** "message delete failed": the message to delete is not there, or the store refused. */
export const JS_MESSAGE_DELETE_FAILED = 10057;

/** Whether `error` says a stream, consumer or message does not exist. */
export function isNotFound(error: unknown): boolean {
  const code = apiCode(error);
  if (code === JS_STREAM_NOT_FOUND || code === JS_CONSUMER_NOT_FOUND || code === JS_MESSAGE_NOT_FOUND)
    return true;
  return error instanceof Error && /not found/i.test(error.message) && code !== undefined;
}

/**
 * Wraps a client or server failure as a {@link BackendError} naming the operation. Connection-level
 * failures (timeouts, a closed or reconnecting connection, no responders, JetStream briefly unavailable)
 * are transient; other API refusals are not. duetime's own errors pass through unchanged.
 */
export function toBackendError(operation: string, error: unknown): DuetimeError {
  if (error instanceof DuetimeError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new BackendError(operation, message, { cause: error, transient: isConnectionLevelError(error) });
}
