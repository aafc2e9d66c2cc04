import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The packages of the libraries duetime is compared with. */
export const PEER_PACKAGES = ['bullmq', 'pg-boss', 'graphile-worker', 'croner', 'cron-parser'] as const;

/**
 * The installed version of package `name`, as Node.js would find it from this file: the package.json of the
 * nearest `node_modules/<name>` up the directory tree (read directly, since some packages do not export
 * their package.json); undefined when it is not installed.
 */
export function installedVersion(name: string): string | undefined {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'node_modules', name, 'package.json'), 'utf8')) as {
        version?: string;
      };
      return manifest.version;
    } catch {
      // Not installed at this level: look further up.
    }
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/** Whether a result row's subject is `pkg`'s (`pg-boss`, `pg-boss/best`, `croner (utcOffset: 0)`). */
export function isSubjectOf(subject: string, pkg: string): boolean {
  return subject === pkg || subject.startsWith(`${pkg}/`) || subject.startsWith(`${pkg} `);
}

/** The installed version of every peer that has a row in `subjects`. */
export function peerVersions(subjects: string[]): Record<string, string> {
  const versions: Record<string, string> = {};
  for (const pkg of PEER_PACKAGES) {
    if (!subjects.some((s) => isSubjectOf(s, pkg))) continue;
    const version = installedVersion(pkg);
    if (version) versions[pkg] = version;
  }
  return versions;
}
