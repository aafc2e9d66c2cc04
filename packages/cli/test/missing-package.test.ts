import { describe, expect, it, vi } from 'vitest';
import { type CliIo, EXIT, MissingPackageError, runCli } from '../src/index.js';

// The backend packages are optional peers of the CLI; here the one a URL names is not installed.
vi.mock('../src/open-backend.js', async (importOriginal) => ({
  ...(await importOriginal<typeof import('../src/open-backend.js')>()),
  openBackend: async () => {
    throw new MissingPackageError('@duetime/backend-postgres', 'the backend URL postgres://');
  },
}));

function io(): CliIo & { errors: () => string } {
  const err: string[] = [];
  return {
    out: () => {},
    err: (t) => err.push(t),
    confirm: async () => false,
    env: {},
    cwd: process.cwd(),
    isTTY: false,
    errors: () => err.join('\n'),
  };
}

describe('a backend package that is not installed', () => {
  it.each([
    ['dashboard', ['dashboard', '--backend', 'postgres://127.0.0.1/x', '--port', '0']],
    ['schedules list', ['schedules', 'list', '--backend', 'postgres://127.0.0.1/x']],
  ])('%s exits 5 naming the package and how to install it', async (_name, args) => {
    const t = io();
    expect(await runCli(args, t)).toBe(EXIT.missingPackage);
    expect(t.errors()).toContain('npm install @duetime/backend-postgres');
    expect(t.errors()).not.toContain('nothing to show');
  });
});
