import { BackendError, ClosedError, DuetimeError } from '@duetime/core';
import { JetStreamApiError } from '@nats-io/jetstream';
import { errors } from '@nats-io/transport-node';

/** JetStream API error codes this backend tells apart. */
export const JS_STREAM_NOT_FOUND = 10059;
export const JS_WRONG_LAST_SEQUENCE = 10071;
export const JS_MESSAGE_NOT_FOUND = 10037;
/** An atomic batch whose commit carries a message id the stream stored already (a retried batch). */
export const JS_DUPLICATE_MESSAGE_ID = 10201;
export const JS_CONSUMER_NOT_FOUND = 10014;
export const JS_SCHEDULE_PATTERN_INVALID = 10189;
/** "message delete failed": the message to delete is not there, or the store refused. */
export const JS_MESSAGE_DELETE_FAILED = 10057;

/** The JetStream API error code of `error`, if it is one. */
export function apiCode(error: unknown): number | undefined {
  return error instanceof JetStreamApiError ? error.code : undefined;
}

/**
 * The same, found by a clustered stream's leader when it proposed the write (several writers raced for
 * one subject): `wrong last sequence` without the sequence.
 */
export const JS_WRONG_LAST_SEQUENCE_PROPOSED = 10164;

/** An expectation header (`Nats-Expected-Last-Sequence`, `…-Subject-Sequence`) was not met. */
export function isWrongLastSequence(error: unknown): boolean {
  const code = apiCode(error);
  return code === JS_WRONG_LAST_SEQUENCE || code === JS_WRONG_LAST_SEQUENCE_PROPOSED;
}

export function isStreamNotFound(error: unknown): boolean {
  return apiCode(error) === JS_STREAM_NOT_FOUND;
}

/**
 * Whether the failure is of the connection or of a server that is briefly away, so a retry later may
 * succeed: the connection is down or reconnecting, the request timed out, the server is restarting (no
 * responders for the JetStream API), or JetStream reported itself unavailable (503).
 */
export function isConnectionLevelError(error: unknown): boolean {
  if (error instanceof JetStreamApiError) return error.status === 503;
  return (
    error instanceof errors.TimeoutError ||
    error instanceof errors.ConnectionError ||
    error instanceof errors.RequestError ||
    error instanceof errors.NoRespondersError ||
    error instanceof errors.DrainingConnectionError ||
    error instanceof errors.ClosedConnectionError ||
    isJetStreamNotAnswering(error)
  );
}

/** The client's "jetstream is not enabled" error: no responders on the JetStream API (often a restart). */
function isJetStreamNotAnswering(error: unknown): boolean {
  return error instanceof Error && error.name === 'JetStreamNotEnabled';
}

/**
 * Turns whatever the NATS client threw into a duetime error naming the operation and the server:
 * connection-level failures become a transient {@link BackendError}, API refusals a permanent one, a
 * connection this backend closed a {@link ClosedError}. duetime's own errors pass through unchanged.
 */
export function toDuetimeError(
  error: unknown,
  operation: string,
  server: string,
  closed = false,
): DuetimeError {
  if (error instanceof DuetimeError) return error;
  if (closed) return new ClosedError('nats backend');
  const raw = error instanceof Error ? error.message : String(error);
  // A retry later may succeed: a connection-level failure, or one of the backend's own streams missing
  // (right after a restart the server is still loading it).
  const transient = isConnectionLevelError(error) || isStreamNotFound(error);
  let message = raw;
  if (isJetStreamNotAnswering(error) || (error instanceof errors.RequestError && error.isNoResponders()))
    message = `JetStream does not answer (${raw}); the server may be restarting or run without -js`;
  else if (isStreamNotFound(error))
    message = `${raw}; the stream was deleted or the server has not loaded it yet`;
  return new BackendError(operation, `${message} (server ${server})`, { cause: error, transient });
}

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

/** A compare-and-set loop that lost every one of its `attempts` (someone else wrote each time). */
export function lostRaces(operation: string, attempts: number): BackendError {
  return new BackendError(operation, `lost ${attempts} compare-and-set races in a row`, { transient: true });
}
