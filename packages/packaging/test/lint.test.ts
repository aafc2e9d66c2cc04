import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { publint } from 'publint';
import { formatMessage } from 'publint/utils';
import { describe, expect, inject, it } from 'vitest';
import { PUBLISHED } from './tarballs.js';

const tarballs = inject('tarballs');
const require = createRequire(import.meta.url);
const attwBin = join(dirname(require.resolve('@arethetypeswrong/cli/package.json')), 'dist', 'index.js');

/** The files and package.json a tarball holds (npm tarballs keep everything under `package/`). */
async function contents(tarball: string): Promise<{ files: string[]; pkg: Record<string, unknown> }> {
  const run = promisify(execFile);
  const { stdout } = await run('tar', ['-tzf', tarball]);
  const files = stdout.split('\n').filter(Boolean);
  const { stdout: json } = await run('tar', ['-xzOf', tarball, 'package/package.json']);
  return { files, pkg: JSON.parse(json) };
}

/** Every condition name used anywhere in an `exports` value. */
function conditions(exports: unknown): string[] {
  if (typeof exports !== 'object' || exports === null) return [];
  return Object.entries(exports).flatMap(([key, value]) => [
    ...(key.startsWith('.') ? [] : [key]),
    ...conditions(value),
  ]);
}

describe.each(PUBLISHED)('the published @duetime/%s', (name) => {
  it('passes publint (strict, suggestions included)', async () => {
    const bytes = readFileSync(tarballs[name]);
    const tarball = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
    const { messages, pkg } = await publint({ pack: { tarball }, level: 'suggestion', strict: true });
    expect(messages.map((m) => `${m.type} ${m.code}: ${formatMessage(m, pkg)}`)).toEqual([]);
  });

  it('passes arethetypeswrong for an ES module package (node16 from ESM, bundler)', async () => {
    const outcome = await promisify(execFile)(
      process.execPath,
      [attwBin, tarballs[name], '--profile', 'esm-only', '--format', 'ascii'],
      { env: { ...process.env, FORCE_COLOR: '0' } },
    ).then(
      () => 'ok',
      (error: { stdout?: string; message: string }) => error.stdout || error.message,
    );
    expect(outcome).toBe('ok');
  });

  it('ships a LICENSE, its README, links that work off the repository, and no internal export conditions', async () => {
    const { files, pkg } = await contents(tarballs[name]);
    expect(files).toContain('package/LICENSE');
    expect(files).toContain('package/README.md');
    expect(files).toContain('package/dist/index.js');
    expect(files).toContain('package/dist/index.d.ts');
    expect(files.filter((f) => /\.test\.ts$|\/test\//.test(f))).toEqual([]);
    expect(pkg.license).toBe('MIT');
    expect(pkg.repository).toMatchObject({ type: 'git', directory: `packages/${name}` });
    expect(pkg.homepage).toMatch(/^https:\/\//);
    expect(pkg.bugs).toMatchObject({ url: expect.stringMatching(/^https:\/\//) });
    // `source` points the workspace at TypeScript sources; a consumer must never resolve it.
    expect(conditions(pkg.exports)).not.toContain('source');
    expect(pkg.engines).toEqual({ node: '^20.19.0 || >=22.12.0' });
    const readme = await promisify(execFile)('tar', ['-xzOf', tarballs[name], 'package/README.md']);
    // Relative links break on the registry's page: every link leaves the package by an absolute URL.
    const relative = [...readme.stdout.matchAll(/\]\((?!https?:|#|mailto:)([^)\s]+)\)/g)].map((m) => m[1]);
    expect(relative).toEqual([]);
  });

  it('depends on ranges, never on exact versions or the workspace, and leaves shared drivers to the application', async () => {
    const { pkg } = await contents(tarballs[name]);
    const ranges = {
      ...(pkg.dependencies as Record<string, string> | undefined),
      ...(pkg.peerDependencies as Record<string, string> | undefined),
    };
    for (const [dep, range] of Object.entries(ranges)) {
      expect(range, dep).not.toMatch(/^workspace:/);
      expect(range, `${dep} is pinned exactly`).not.toMatch(/^\d+\.\d+\.\d+$/);
    }
    const dependencies = Object.keys((pkg.dependencies as object | undefined) ?? {});
    for (const driver of ['pg', 'better-sqlite3', 'ioredis', '@nats-io/transport-node', 'vitest'])
      expect(dependencies, `${driver} must be a peer dependency`).not.toContain(driver);
  });
});

describe('the published @duetime/cli', () => {
  it('installs no backend, driver or test runner of its own: they are optional peers', async () => {
    const { pkg } = await contents(tarballs.cli);
    expect(Object.keys(pkg.dependencies as object).sort()).toEqual(['@duetime/core', 'luxon']);
    const optional = Object.keys(pkg.peerDependenciesMeta as object).sort();
    expect(optional).toEqual(Object.keys(pkg.peerDependencies as object).sort());
    expect(optional).toEqual(
      expect.arrayContaining([
        '@duetime/backend-sqlite',
        '@duetime/backend-postgres',
        '@duetime/backend-redis',
        '@duetime/backend-nats',
        '@duetime/conformance',
        'tsx',
        'vitest',
      ]),
    );
  });

  it('ships the backend-nats docs its README talks about', async () => {
    const { files } = await contents(tarballs['backend-nats']);
    expect(files).toEqual(
      expect.arrayContaining(['package/docs/design.md', 'package/docs/jetstream-scheduler.md']),
    );
  });
});
