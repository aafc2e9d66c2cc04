import { BackendError, DuetimeError } from '@duetime/core';
import { JetStreamApiError } from '@nats-io/jetstream';
import { errors } from '@nats-io/transport-node';

/** JetStream API error codes this package tells apart. */
export const JS_STREAM_NOT_FOUND = 10059;
export const JS_CONSUMER_NOT_FOUND = 10014;
export const JS_MESSAGE_NOT_FOUND = 10037;
export const JS_WRONG_LAST_SEQUENCE = 10071;
export const JS_SCHEDULE_PATTERN_INVALID = 10189;

/** The JetStream API error code of `error`, if it is one. */
export function apiCode(error: unknown): number | undefined {
  return error instanceof JetStreamApiError ? error.code : undefined;
}

/** Whether `error` says a stream, consumer or message does not exist. */
export function isNotFound(error: unknown): boolean {
  const code = apiCode(error);
  if (code === JS_STREAM_NOT_FOUND || code === JS_CONSUMER_NOT_FOUND || code === JS_MESSAGE_NOT_FOUND)
    return true;
  return error instanceof Error && /not found/i.test(error.message) && code !== undefined;
}

/** Whether `error` is an optimistic-concurrency rejection (`Nats-Expected-Last-Subject-Sequence`). */
export function isWrongLastSequence(error: unknown): boolean {
  return apiCode(error) === JS_WRONG_LAST_SEQUENCE;
}

/**
 * Wraps a client or server failure as a {@link BackendError} naming the operation. Connection-level
 * failures (timeouts, a closed or reconnecting connection, no responders, JetStream briefly unavailable)
 * are transient; other API refusals are not. duetime's own errors pass through unchanged.
 */
export function toBackendError(operation: string, error: unknown): DuetimeError {
  if (error instanceof DuetimeError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new BackendError(operation, message, { cause: error, transient: isTransient(error) });
}

function isTransient(error: unknown): boolean {
  if (error instanceof JetStreamApiError) return error.status === 503;
  return (
    error instanceof errors.TimeoutError ||
    error instanceof errors.ConnectionError ||
    error instanceof errors.RequestError ||
    error instanceof errors.NoRespondersError ||
    error instanceof errors.DrainingConnectionError ||
    error instanceof errors.ClosedConnectionError ||
    (error instanceof Error && error.name === 'JetStreamNotEnabled')
  );
}
