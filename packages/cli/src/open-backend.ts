import { isAbsolute, resolve } from 'node:path';
import { type Backend, InvalidArgumentError, type Logger } from '@duetime/core';

/** The backend URL used when none is given: an SQLite file in the working directory. */
export const DEFAULT_BACKEND_URL = 'sqlite:./duetime.db';

export interface OpenBackendOptions {
  logger?: Logger;
  /** For `sqlite:` URLs, relative paths resolve against this directory (default: the working directory). */
  cwd?: string;
}

/** The backends a URL can name, with the schemes each answers to. */
export const BACKEND_SCHEMES = {
  sqlite: ['sqlite:'],
  postgres: ['postgres:', 'postgresql:'],
  redis: ['redis:', 'rediss:'],
  nats: ['nats:', 'tls:'],
} as const;

export type BackendKind = keyof typeof BACKEND_SCHEMES;

/** Which backend a URL names; throws an InvalidArgumentError naming `field` for anything else. */
export function backendKind(url: string, field = 'backend'): BackendKind {
  if (typeof url !== 'string' || url.trim() === '')
    throw new InvalidArgumentError(field, url, 'must be a backend URL such as sqlite:./duetime.db');
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  for (const [kind, schemes] of Object.entries(BACKEND_SCHEMES) as [BackendKind, readonly string[]][]) {
    if (scheme && schemes.includes(`${scheme}:`)) return kind;
  }
  throw new InvalidArgumentError(
    field,
    redact(url),
    'has an unknown scheme; use sqlite:<file>, postgres://…, redis://…, or nats://…',
  );
}

/** The SQLite file a `sqlite:` URL names (`sqlite:./a.db`, `sqlite:///abs/a.db`, `sqlite::memory:`). */
export function sqliteFilename(url: string, cwd = process.cwd()): string {
  let rest = url.slice('sqlite:'.length);
  if (rest.startsWith('//')) rest = rest.slice(2);
  try {
    rest = decodeURIComponent(rest.split('?')[0] ?? '');
  } catch {
    throw new InvalidArgumentError('backend', redact(url), 'has a malformed percent-encoding in its path');
  }
  if (rest === '') throw new InvalidArgumentError('backend', url, 'names no file; use sqlite:./duetime.db');
  if (rest === ':memory:') return rest;
  return isAbsolute(rest) ? rest : resolve(cwd, rest);
}

/** Hides the password of a URL for messages. */
export function redact(url: string): string {
  return url.replace(/(\/\/[^:/@]*:)[^@/]*@/, '$1***@');
}

/**
 * Opens the backend a URL names: `sqlite:./file.db` (the default), `postgres://…`, `redis://…`,
 * `nats://host:port[,host:port]`. Each backend package is loaded only when its URL is used.
 */
export async function openBackend(
  url: string = DEFAULT_BACKEND_URL,
  options: OpenBackendOptions = {},
): Promise<Backend> {
  const kind = backendKind(url);
  const logger = options.logger ? { logger: options.logger } : {};
  switch (kind) {
    case 'sqlite': {
      const { createSqliteBackend } = await import('@duetime/backend-sqlite');
      return createSqliteBackend({ filename: sqliteFilename(url, options.cwd) }, logger);
    }
    case 'postgres': {
      const { createPostgresBackend } = await import('@duetime/backend-postgres');
      return createPostgresBackend({ connectionString: url }, logger);
    }
    case 'redis': {
      const { createRedisBackend } = await import('@duetime/backend-redis');
      return createRedisBackend({ url }, logger);
    }
    case 'nats': {
      const { createNatsBackend } = await import('@duetime/backend-nats');
      return createNatsBackend({ servers: natsServers(url) }, logger);
    }
  }
}

/** `nats://a:4222,b:4222` → `['nats://a:4222', 'nats://b:4222']`. */
export function natsServers(url: string): string[] {
  const scheme = url.slice(0, url.indexOf('://') + 3);
  return url
    .slice(scheme.length)
    .split(',')
    .map((host) => host.trim())
    .filter((host) => host.length > 0)
    .map((host) => `${scheme}${host}`);
}
