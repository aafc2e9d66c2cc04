import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidArgumentError } from '@duetime/core';
import type { CliIo } from '../io.js';
import { DEFAULT_BACKEND_URL } from '../open-backend.js';

/** The `--backend` option every command that touches data takes. */
export const backendOptions = { backend: { type: 'string' } } as const;

/** `--backend`, else `DUETIME_BACKEND`, else the default SQLite file. */
export function backendUrl(values: { backend?: string | undefined }, io: CliIo): string {
  return values.backend ?? io.env.DUETIME_BACKEND ?? DEFAULT_BACKEND_URL;
}

/** Parses an ISO-8601 instant given on the command line. */
export function parseInstant(field: string, text: string): Date {
  const hasZone = /(Z|[+-]\d{2}:?\d{2})$/i.test(text.trim());
  const date = new Date(text);
  if (Number.isNaN(date.getTime()))
    throw new InvalidArgumentError(field, text, 'is not an ISO-8601 instant such as 2026-03-08T06:59:00Z');
  if (!hasZone && /T\d/.test(text))
    throw new InvalidArgumentError(
      field,
      text,
      'has no UTC offset; add Z or +01:00 so the instant is unambiguous',
    );
  return date;
}

/** Imports a user module given as a path (relative to the working directory) or a URL. TypeScript works. */
export async function importUserModule(specifier: string, io: CliIo): Promise<Record<string, unknown>> {
  const url =
    /^[a-z][a-z0-9+.-]*:/i.test(specifier) && !/^[a-z]:\\/i.test(specifier)
      ? specifier
      : pathToFileURL(isAbsolute(specifier) ? specifier : resolve(io.cwd, specifier)).href;
  if (url.endsWith('.ts') || url.endsWith('.mts') || url.endsWith('.cts')) {
    const { register } = await import('tsx/esm/api');
    register();
  }
  try {
    return (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new InvalidArgumentError('module', specifier, `could not be loaded: ${(error as Error).message}`, {
      cause: error,
    });
  }
}
