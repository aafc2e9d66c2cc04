import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DuetimeError } from '@duetime/core';

/**
 * A package a command needs is not installed. The backends, the conformance suite, vitest and tsx are
 * optional peers of `@duetime/cli`: installing the CLI compiles no database driver you do not use.
 */
export class MissingPackageError extends DuetimeError {
  /** The npm package to install, e.g. `@duetime/backend-postgres`. */
  readonly packageName: string;

  constructor(packageName: string, purpose: string, options: { cause?: unknown } = {}) {
    super(
      'DUETIME_NOT_FOUND',
      `${purpose} needs the package ${packageName}, which is not installed: run \`npm install ${packageName}\` in your project (next to @duetime/cli)`,
      options,
    );
    this.packageName = packageName;
  }
}

/**
 * The package an ERR_MODULE_NOT_FOUND / MODULE_NOT_FOUND error says is missing (`Cannot find package
 * 'pg' imported from …`), when it names a package rather than a file.
 */
function missingPackage(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return undefined;
  const message = error instanceof Error ? error.message : '';
  const named = /Cannot find (?:package|module) '([^']+)'/.exec(message)?.[1];
  if (!named || named.startsWith('.') || named.startsWith('/') || /^[a-z]:[\\/]/i.test(named))
    return undefined;
  return packageOf(named);
}

/** The package a specifier names: `vitest/node` → `vitest`, `@duetime/core/x` → `@duetime/core`. */
function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return (specifier.startsWith('@') ? parts.slice(0, 2) : parts.slice(0, 1)).join('/');
}

/**
 * Loads an optional package (or a subpath of one, `vitest/node`). With `cwd`, from the project there
 * first (so a globally installed CLI uses the application's own copy of a backend), else from beside the
 * CLI. Only duetime's packages are looked up in the project: they have a single entry point, which a
 * CommonJS resolution finds as well as an ES one.
 *
 * @throws {MissingPackageError} naming the package and how to install it.
 */
export async function loadOptional<T>(name: string, purpose: string, cwd?: string): Promise<T> {
  let fromProject: string | undefined;
  if (cwd !== undefined && name.startsWith('@duetime/'))
    try {
      fromProject = createRequire(join(cwd, 'package.json')).resolve(name);
    } catch {
      // Not in the project: try beside the CLI.
    }
  try {
    return (await import(fromProject ? pathToFileURL(fromProject).href : name)) as T;
  } catch (error) {
    // The package itself, or a dependency it leaves to the application (a driver peer such as pg).
    const missing = missingPackage(error);
    if (missing) throw new MissingPackageError(missing, purpose, { cause: error });
    throw error;
  }
}
