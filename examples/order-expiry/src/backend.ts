import { rmSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { type Backend, InvalidArgumentError } from '@duetime/core';

/** The demo's default database, recreated on every run. */
export const DEFAULT_BACKEND_URL = 'sqlite:./order-expiry.db';

/**
 * Opens the backend a URL names. Only `sqlite:<file>` (and `sqlite::memory:`) for now; other backends
 * plug in here by scheme. With `fresh`, a SQLite file left by an earlier run is deleted first.
 */
export async function openBackend(url: string, options: { fresh?: boolean } = {}): Promise<Backend> {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if (scheme !== 'sqlite')
    throw new InvalidArgumentError(
      'DUETIME_BACKEND',
      url,
      'this example runs on SQLite for now; use sqlite:./order-expiry.db or sqlite::memory:',
    );
  let path = url.slice('sqlite:'.length);
  if (path.startsWith('//')) path = path.slice(2);
  if (path === '') throw new InvalidArgumentError('DUETIME_BACKEND', url, 'names no file');
  if (path !== ':memory:') {
    path = isAbsolute(path) ? path : resolve(path);
    if (options.fresh) for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
  }
  return createSqliteBackend({ filename: path });
}
