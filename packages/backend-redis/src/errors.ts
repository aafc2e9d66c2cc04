import { BackendError, CorruptDataError, DuetimeError } from '@duetime/core';

// Server replies that mean "try again later": loading a dataset, a busy script, a failover or resharding.
const TRANSIENT_REPLY = /^(LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY|MOVED|ASK)\b/;
// Refused logins and permissions: retrying the same call cannot help.
const AUTH_REPLY = /^(NOAUTH|WRONGPASS|NOPERM)\b/;
// Redis appends where a script raised an error; the key named before it is what matters.
const SCRIPT_SUFFIX = / script: [0-9a-f]+, on @user_script:\d+\.?$/;

// What ioredis and Node say when the connection, not the command, failed.
const CONNECTION_MESSAGE =
  /Connection is closed|Command timed out|Stream isn't writeable|max retries per request|ECONN|EPIPE|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|socket/i;

function isConnectionError(error: Error): boolean {
  const code = (error as { code?: unknown }).code;
  return (
    error.name === 'MaxRetriesPerRequestError' ||
    (typeof code === 'string' && code.startsWith('E')) ||
    CONNECTION_MESSAGE.test(error.message)
  );
}

/**
 * Turns what ioredis threw into a duetime error naming the operation and the server, never a password.
 * `key` names the key the command targeted, for WRONGTYPE replies (a key of the wrong type under the
 * prefix). Duetime errors pass through unchanged.
 */
export function mapRedisError(error: unknown, operation: string, target: string, key?: string): DuetimeError {
  if (error instanceof DuetimeError) return error;
  if (!(error instanceof Error))
    return new BackendError(operation, `${String(error)} (redis ${target})`, { cause: error });
  const message = error.message.replace(SCRIPT_SUFFIX, '');
  const cause = { cause: error };
  const kept = `(redis ${target}); duetime never overwrites it: remove or rename that key, or use another prefix`;
  if (error.name === 'ReplyError') {
    if (message.startsWith('DUETIME_CORRUPT '))
      return new CorruptDataError(`${operation}: ${message.slice('DUETIME_CORRUPT '.length)} ${kept}`, cause);
    if (message.startsWith('WRONGTYPE'))
      return new CorruptDataError(
        `${operation}: ${key ? `key ${key}` : 'a key under the prefix'} holds a value of the wrong type ${kept}`,
        cause,
      );
    if (AUTH_REPLY.test(message))
      return new BackendError(
        operation,
        `redis ${target} refused the login or the command: ${message}`,
        cause,
      );
    const transient = TRANSIENT_REPLY.test(message);
    return new BackendError(operation, `redis ${target} replied: ${message}`, { ...cause, transient });
  }
  if (isConnectionError(error))
    return new BackendError(operation, `no answer from redis ${target}: ${message}`, {
      ...cause,
      transient: true,
    });
  return new BackendError(operation, `failed against redis ${target}: ${error.name}: ${message}`, cause);
}
