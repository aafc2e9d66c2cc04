import { isAbsolute, resolve } from 'node:path';
import {
  type Backend,
  checkUrlParams,
  InvalidArgumentError,
  type Logger,
  parseBackendUrl,
  redactUrl,
} from '@duetime/core';
import { loadOptional } from './optional.js';

/** The backend URL used when none is given: an SQLite file in the working directory. */
export const DEFAULT_BACKEND_URL = 'sqlite:./duetime.db';

export interface OpenBackendOptions {
  logger?: Logger;
  /** For `sqlite:` URLs, relative paths resolve against this directory (default: the working directory). */
  cwd?: string;
  /**
   * Create or migrate the store when opening (default true). With `false` the backend opens an existing
   * store only and changes nothing while opening; a store that is not there rejects with a `NotFoundError`
   * (code `DUETIME_NOT_FOUND`). Commands that only inspect open with `false`.
   */
  migrate?: boolean;
}

/** The backends a URL can name, with the schemes each answers to. */
export const BACKEND_SCHEMES = {
  sqlite: ['sqlite:'],
  postgres: ['postgres:', 'postgresql:'],
  redis: ['redis:', 'rediss:'],
  nats: ['nats:', 'tls:'],
} as const;

export type BackendKind = keyof typeof BACKEND_SCHEMES;

/** The package each backend lives in; loaded only when its URL is used. */
export const BACKEND_PACKAGES: Record<BackendKind, string> = {
  sqlite: '@duetime/backend-sqlite',
  postgres: '@duetime/backend-postgres',
  redis: '@duetime/backend-redis',
  nats: '@duetime/backend-nats',
};

/** Query parameters pg reads from a connection URL (passed on to it as they are). */
const PG_PARAMETERS = [
  'host',
  'port',
  'user',
  'password',
  'db',
  'encoding',
  'ssl',
  'sslmode',
  'sslcert',
  'sslkey',
  'sslrootcert',
  'sslnegotiation',
  'uselibpqcompat',
  'options',
  'client_encoding',
  'application_name',
  'fallback_application_name',
  'statement_timeout',
  'lock_timeout',
  'idle_in_transaction_session_timeout',
  'query_timeout',
] as const;

/**
 * The URL parameter naming each backend's store location: the PostgreSQL schema, the SQLite table prefix,
 * the Redis or NATS prefix. Any other parameter is refused (PostgreSQL URLs also take pg's own).
 */
export const STORE_PARAMETER = {
  sqlite: 'tablePrefix',
  postgres: 'schema',
  redis: 'prefix',
  nats: 'prefix',
} as const satisfies Record<BackendKind, string>;

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
    redactUrl(url),
    'has an unknown scheme; use sqlite:<file>, postgres://…, redis://…, or nats://…',
  );
}

/** A backend URL taken apart: what to open, and where its store lives. */
export type BackendTarget =
  | { kind: 'sqlite'; display: string; filename: string; tablePrefix?: string }
  | { kind: 'postgres'; display: string; connectionString: string; schema?: string }
  | { kind: 'redis'; display: string; url: string; prefix?: string }
  | { kind: 'nats'; display: string; servers: string[]; prefix?: string };

/** Splits `text` at its first `?` into the part before and the query parameters after. */
function splitQuery(text: string): [string, URLSearchParams] {
  const at = text.indexOf('?');
  return at < 0
    ? [text, new URLSearchParams()]
    : [text.slice(0, at), new URLSearchParams(text.slice(at + 1))];
}

/**
 * Reads a backend URL: its kind, what to connect to, and the store's location from its parameter
 * (`?schema=`, `?tablePrefix=`, `?prefix=`). Unknown parameters are an InvalidArgumentError naming
 * them and listing the known ones.
 */
export function parseBackendTarget(url: string, cwd = process.cwd(), field = 'backend'): BackendTarget {
  const kind = backendKind(url, field);
  const display = redactUrl(url);
  const store = STORE_PARAMETER[kind];
  switch (kind) {
    case 'sqlite': {
      const [path, search] = splitQuery(url);
      const params = checkUrlParams(search, { field, params: [store] }, display);
      return {
        kind,
        display,
        filename: sqliteFilename(path, cwd),
        ...(params.has(store) ? { tablePrefix: params.get(store) as string } : {}),
      };
    }
    case 'postgres': {
      const { url: parsed, params } = parseBackendUrl(url, {
        field,
        schemes: BACKEND_SCHEMES.postgres,
        example: 'postgres://user:password@host:5432/database?schema=duetime',
        host: false,
        params: [store, ...PG_PARAMETERS],
      });
      parsed.searchParams.delete(store);
      return {
        kind,
        display,
        connectionString: parsed.href,
        ...(params.has(store) ? { schema: params.get(store) as string } : {}),
      };
    }
    case 'redis': {
      const { url: parsed, params } = parseBackendUrl(url, {
        field,
        schemes: BACKEND_SCHEMES.redis,
        example: 'redis://[user:password@]host[:port][/db]?prefix=duetime',
        params: [store],
      });
      parsed.searchParams.delete(store);
      return {
        kind,
        display,
        url: parsed.href,
        ...(params.has(store) ? { prefix: params.get(store) as string } : {}),
      };
    }
    case 'nats': {
      const [servers, search] = splitQuery(url);
      const params = checkUrlParams(search, { field, params: [store] }, display);
      return {
        kind,
        display,
        servers: natsServers(servers),
        ...(params.has(store) ? { prefix: params.get(store) as string } : {}),
      };
    }
  }
}

/** The SQLite file a `sqlite:` URL names (`sqlite:./a.db`, `sqlite:///abs/a.db`, `sqlite::memory:`). */
export function sqliteFilename(url: string, cwd = process.cwd()): string {
  let rest = url.slice('sqlite:'.length);
  if (rest.startsWith('//')) rest = rest.slice(2);
  try {
    rest = decodeURIComponent(rest.split('?')[0] ?? '');
  } catch {
    throw new InvalidArgumentError('backend', redactUrl(url), 'has a malformed percent-encoding in its path');
  }
  if (rest === '') throw new InvalidArgumentError('backend', url, 'names no file; use sqlite:./duetime.db');
  if (rest === ':memory:') return rest;
  return isAbsolute(rest) ? rest : resolve(cwd, rest);
}

/** Hides the password of a URL for messages. */
export function redact(url: string): string {
  return redactUrl(url);
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

/**
 * Opens the backend a URL names: `sqlite:./file.db` (the default), `postgres://…`, `redis://…`,
 * `nats://host:port[,host:port]`, each with its store location as a parameter (`?tablePrefix=`,
 * `?schema=`, `?prefix=`). Each backend package is an optional peer of `@duetime/cli`, loaded only when its
 * URL is used (from the project in `cwd` first); a missing one is a {@link MissingPackageError} naming it.
 */
export async function openBackend(
  url: string = DEFAULT_BACKEND_URL,
  options: OpenBackendOptions = {},
): Promise<Backend> {
  const cwd = options.cwd ?? process.cwd();
  const target = parseBackendTarget(url, cwd);
  const common = {
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.migrate !== undefined ? { migrate: options.migrate } : {}),
  };
  const purpose = `the backend URL ${target.display}`;
  switch (target.kind) {
    case 'sqlite': {
      const { createSqliteBackend } = await loadOptional<typeof import('@duetime/backend-sqlite')>(
        BACKEND_PACKAGES.sqlite,
        purpose,
        cwd,
      );
      return createSqliteBackend(
        { filename: target.filename },
        { ...common, ...(target.tablePrefix !== undefined ? { tablePrefix: target.tablePrefix } : {}) },
      );
    }
    case 'postgres': {
      const { createPostgresBackend } = await loadOptional<typeof import('@duetime/backend-postgres')>(
        BACKEND_PACKAGES.postgres,
        purpose,
        cwd,
      );
      return createPostgresBackend(
        { connectionString: target.connectionString },
        { ...common, ...(target.schema !== undefined ? { schema: target.schema } : {}) },
      );
    }
    case 'redis': {
      const { createRedisBackend } = await loadOptional<typeof import('@duetime/backend-redis')>(
        BACKEND_PACKAGES.redis,
        purpose,
        cwd,
      );
      return createRedisBackend(
        { url: target.url },
        { ...common, ...(target.prefix !== undefined ? { prefix: target.prefix } : {}) },
      );
    }
    case 'nats': {
      const { createNatsBackend } = await loadOptional<typeof import('@duetime/backend-nats')>(
        BACKEND_PACKAGES.nats,
        purpose,
        cwd,
      );
      // `migrate: false` (inspecting commands) opens an existing store only, as on the other backends.
      const natsOptions: Parameters<typeof createNatsBackend>[1] = {
        ...common,
        ...(target.prefix !== undefined ? { prefix: target.prefix } : {}),
      };
      return createNatsBackend({ servers: target.servers }, natsOptions);
    }
  }
}
