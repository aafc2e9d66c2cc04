import { type ExecFileException, execFile } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { PUBLISHED } from './tarballs.js';

/**
 * What a user gets: the packed tarballs installed with npm into a new application outside the workspace
 * (a CommonJS package in a temporary directory), type-checked with `skipLibCheck: false`, and run.
 *
 * Third-party packages come from the npm registry at the versions the workspace tests with. One shortcut:
 * better-sqlite3 is installed without running its build script, and the native binary the workspace
 * already compiled for this Node.js is copied in, which saves a minute of compiling SQLite. Everything
 * duetime ships comes from the tarballs.
 */

const tarballs = inject('tarballs');
const require = createRequire(import.meta.url);
const FIXTURE = fileURLToPath(new URL('./fixtures/app', import.meta.url));
const TSC = join(dirname(require.resolve('typescript/package.json')), 'bin', 'tsc');
const DRIVERS = [
  'better-sqlite3@12.6.2',
  'pg@8.23.1',
  'ioredis@5.11.1',
  '@nats-io/transport-node@3.4.0',
  '@nats-io/jetstream@3.4.0',
  'vitest@3.2.7',
  'tsx@4.23.15',
  '@types/node@20.19.43',
];

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * The environment of a user's shell: without what the workspace's tools add (pnpm's shims put the
 * workspace's packages on NODE_PATH, pnpm scripts set npm_* variables, vitest its own), which would let
 * the application find packages it did not install.
 */
const userEnv: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries(process.env).filter(
    ([name]) => !/^(NODE_PATH|NODE_OPTIONS|npm_|PNPM_|VITEST|TEST$|TURBO_)/i.test(name),
  ),
);

/** Runs a command to its end; never rejects (the outcome says how it went). */
function exec(file: string, args: string[], cwd: string, timeout = 180_000): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { cwd, timeout, maxBuffer: 16 * 1024 * 1024, env: { ...userEnv, NO_COLOR: '1', FORCE_COLOR: '0' } },
      (error: ExecFileException | null, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }),
    );
  });
}

/** `npm install` from the registry; tried twice, so one dropped connection to the registry does not fail CI. */
async function npmInstall(cwd: string, specs: string[]): Promise<void> {
  const args = [
    'install',
    '--no-audit',
    '--no-fund',
    '--prefer-offline',
    '--ignore-scripts',
    '--loglevel=error',
  ];
  let outcome: Outcome | undefined;
  for (let attempt = 1; attempt <= 2; attempt++) {
    outcome = await exec('npm', [...args, ...specs], cwd, 300_000);
    if (outcome.code === 0) return;
  }
  throw new Error(
    `npm install failed in ${cwd} (exit ${outcome?.code}): ${outcome?.stderr || outcome?.stdout}`,
  );
}

/** Puts the workspace's compiled better-sqlite3 binary where the skipped build would have put it. */
function copySqliteBinary(projectDir: string): void {
  const built = join(
    dirname(require.resolve('better-sqlite3/package.json')),
    'build',
    'Release',
    'better_sqlite3.node',
  );
  const target = join(projectDir, 'node_modules', 'better-sqlite3', 'build', 'Release');
  mkdirSync(target, { recursive: true });
  copyFileSync(built, join(target, 'better_sqlite3.node'));
}

const root = mkdtempSync(join(tmpdir(), 'duetime-fresh-app-'));
const app = join(root, 'app');
const duetime = (args: string[], cwd = app) =>
  exec(process.execPath, [join(app, 'node_modules', '@duetime', 'cli', 'dist', 'bin.js'), ...args], cwd);

beforeAll(async () => {
  cpSync(FIXTURE, app, { recursive: true });
  await npmInstall(app, [...PUBLISHED.map((name) => tarballs[name]), ...DRIVERS]);
  copySqliteBinary(app);
}, 300_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('a fresh application that installs the packed tarballs', () => {
  it('type-checks against every package with skipLibCheck: false, the SQL handles typed by their drivers', async () => {
    const outcome = await exec(process.execPath, [TSC, '-p', join(app, 'tsconfig.json')], app);
    expect(outcome.stdout + outcome.stderr).toBe('');
    expect(outcome.code).toBe(0);
  });

  it('inspects before anything exists without creating a file, then runs a schedule through SQLite', async () => {
    const before = await duetime(['schedules', 'list', '--backend', 'sqlite:./app.db']);
    expect(before.stdout).toBe('');
    expect(before.stderr).toMatch(
      /no duetime database at .*app\.db: the file does not exist.*\[DUETIME_NOT_FOUND\]/,
    );
    expect(before.code).toBe(1);
    expect(existsSync(join(app, 'app.db'))).toBe(false);

    const main = await exec(process.execPath, [join(app, 'dist', 'src', 'main.mjs')], app);
    expect(main.stderr).toBe('');
    expect(main.stdout.trim()).toBe('expired [{"id":"ORD-1"}]; pending 0');

    const after = await duetime(['schedules', 'list', '--backend', 'sqlite:./app.db']);
    expect(after.stdout.trim()).toBe('no pending schedules');
  });

  it('lets CommonJS code require() the packages on this Node.js', async () => {
    const outcome = await exec(process.execPath, [join(app, 'require.cjs')], app);
    expect(outcome.stderr).toBe('');
    expect(outcome.stdout.trim()).toBe('require ok: function 2026-03-30T07:00:00.000Z');
  });

  it('describes a TypeScript registry in this CommonJS package, listing only the options it sets', async () => {
    const outcome = await duetime(['describe', './schedules.ts', '-n', '1']);
    expect(outcome.stderr).toBe('');
    expect(outcome.code).toBe(0);
    const lines = outcome.stdout.split('\n');
    expect(lines.find((l) => l.startsWith('report'))).not.toContain('withoutOverlap');
    expect(lines.find((l) => l.startsWith('heartbeat'))).toContain('withoutOverlap');
    expect(outcome.stdout).toContain('2 declarations');
  });
});

describe('a CLI installed apart from the application (a second copy of @duetime/core)', () => {
  const global = join(root, 'global');

  beforeAll(async () => {
    mkdirSync(global);
    await npmInstall(global, [tarballs.cli, tarballs.core, 'tsx@4.23.15']);
  }, 300_000);

  const globalCli = (args: string[], cwd: string) =>
    exec(process.execPath, [join(global, 'node_modules', '@duetime', 'cli', 'dist', 'bin.js'), ...args], cwd);

  it("recognises the application's registry and loads the application's backend", async () => {
    expect(realpathSync(join(global, 'node_modules', '@duetime', 'core'))).not.toBe(
      realpathSync(join(app, 'node_modules', '@duetime', 'core')),
    );
    const described = await globalCli(['describe', './schedules.ts', '-n', '1'], app);
    expect(described.stderr).toBe('');
    expect(described.stdout).toContain('2 declarations');
    const listed = await globalCli(['schedules', 'list', '--backend', 'sqlite:./app.db'], app);
    expect(listed.stderr).toBe('');
    expect(listed.stdout.trim()).toBe('no pending schedules');
  });

  it('names the backend package to install when it is missing, with exit code 5', async () => {
    const empty = join(root, 'empty');
    mkdirSync(empty);
    const outcome = await globalCli(['schedules', 'list', '--backend', 'redis://127.0.0.1:6379'], empty);
    expect(outcome.code, outcome.stdout + outcome.stderr).toBe(5);
    expect(outcome.stderr).toContain('needs the package @duetime/backend-redis, which is not installed');
    expect(outcome.stderr).toContain('npm install @duetime/backend-redis');
  });
});
