import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/** The packages users install, by directory under packages/. */
export const PUBLISHED = [
  'core',
  'backend-sqlite',
  'backend-postgres',
  'backend-redis',
  'backend-nats',
  'conformance',
  'dashboard',
  'bindings',
  'cli',
] as const;

export type PublishedPackage = (typeof PUBLISHED)[number];

export const PACKAGES_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export const run = promisify(execFile);

/**
 * Packs every published package with `pnpm pack` into `dir`, as a release would (publishConfig applied,
 * `workspace:` ranges replaced), one after another. Returns each tarball's path.
 */
export async function packAll(dir: string): Promise<Record<PublishedPackage, string>> {
  const tarballs = {} as Record<PublishedPackage, string>;
  for (const name of PUBLISHED) {
    const before = new Set(readdirSync(dir));
    await run('pnpm', ['pack', '--pack-destination', dir], {
      cwd: join(PACKAGES_DIR, name),
      env: { ...process.env, npm_config_update_notifier: 'false' },
    });
    const made = readdirSync(dir).find((f) => !before.has(f) && f.endsWith('.tgz'));
    if (!made) throw new Error(`pnpm pack made no tarball for packages/${name}`);
    tarballs[name] = join(dir, made);
  }
  return tarballs;
}
