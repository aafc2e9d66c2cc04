import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { InvalidArgumentError } from '@duetime/core';
import { type CliIo, isDuetimeError } from '../io.js';
import { DEFAULT_BACKEND_URL } from '../open-backend.js';
import { loadOptional } from '../optional.js';

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

const TYPESCRIPT = /\.[cm]?ts$/i;

/** The first line of a loader's error that says what is wrong, with esbuild's `file:line:col` kept. */
function loadFailure(error: unknown): string {
  // Some loaders (a bundler's transform step) throw plain objects carrying a message.
  const given = (error as { message?: unknown } | null)?.message;
  const message = typeof given === 'string' ? given : String(error);
  // tsx (esbuild): "Transform failed with 1 error:\n/path/file.ts:3:0: ERROR: Expected ")" but found …"
  const transform = /^(\S+:\d+:\d+): ERROR: (.*)$/m.exec(message);
  if (transform) return `syntax error at ${transform[1]}: ${transform[2]}`;
  if (error instanceof SyntaxError) {
    const where = /\((file:\/\/[^)]+)\)|at (file:\/\/\S+)/.exec(error.stack ?? '');
    return `syntax error: ${message.split('\n')[0]}${where ? ` (${where[1] ?? where[2]})` : ''}`;
  }
  return message.split('\n')[0] ?? message;
}

/**
 * Imports a user module given as a path (relative to the working directory) or a URL. TypeScript
 * (`.ts`, `.mts`, `.cts`) is loaded with tsx, an optional peer, whether the project is ES modules or
 * CommonJS; its exports are those of the module, with a CommonJS module's `module.exports` merged in.
 *
 * @throws {InvalidArgumentError} naming `module` when it cannot be loaded (a syntax error with its place);
 *   a duetime error the module throws while loading (a duplicate schedule id, say) as it is.
 */
export async function importUserModule(specifier: string, io: CliIo): Promise<Record<string, unknown>> {
  const url =
    /^[a-z][a-z0-9+.-]*:/i.test(specifier) && !/^[a-z]:\\/i.test(specifier)
      ? specifier
      : pathToFileURL(isAbsolute(specifier) ? specifier : resolve(io.cwd, specifier)).href;
  let mod: Record<string, unknown>;
  try {
    if (TYPESCRIPT.test(new URL(url).pathname) && !import.meta.url.endsWith('.ts')) {
      // tsImport compiles the module for the kind of package it sits in: a `.ts` file in a CommonJS project
      // (no "type": "module") loads as CommonJS, which a plain import() through tsx's ESM hooks cannot do.
      const { tsImport } = await loadOptional<typeof import('tsx/esm/api')>(
        'tsx/esm/api',
        `loading the TypeScript module ${specifier}`,
      );
      mod = (await tsImport(url, import.meta.url)) as Record<string, unknown>;
    } else {
      mod = (await import(url)) as Record<string, unknown>;
    }
  } catch (error) {
    if (isDuetimeError(error)) throw error;
    throw new InvalidArgumentError('module', specifier, `could not be loaded: ${loadFailure(error)}`, {
      cause: error,
    });
  }
  // A CommonJS module's exports arrive as `default` (module.exports), the named ones only when Node's
  // static analysis finds them: merge a plain `module.exports` object under the named exports.
  const cjs = mod.default;
  if (cjs && typeof cjs === 'object' && Object.getPrototypeOf(cjs) === Object.prototype)
    return { ...(cjs as Record<string, unknown>), ...mod };
  return mod;
}
