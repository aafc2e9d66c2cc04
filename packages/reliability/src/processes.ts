import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type WorkerProcess, watchChild } from '@duetime/conformance';
import { build, type Plugin } from 'esbuild';

/**
 * The workers run the workspace's TypeScript sources. Starting `node --import tsx` costs about a second
 * of CPU per process (loading the loader, then transforming every module), and the crash loop starts
 * hundreds of processes on a shared 2-core machine; so the worker entry is bundled once per test process
 * with esbuild (tsx's own transformer), resolving workspace packages through their `source` condition,
 * and every worker starts plain `node` on the bundle (about a fifth of the cost). Dependencies outside
 * the workspace (drivers, native modules) stay external, imported from where their workspace package
 * resolves them.
 */
let bundled: Promise<string> | undefined;

const entry = fileURLToPath(new URL('./worker.ts', import.meta.url));

const externals: Plugin = {
  name: 'external-dependencies',
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, async (args) => {
      if (args.pluginData === 'resolving' || args.path.startsWith('@duetime/')) return undefined;
      if (args.path.startsWith('node:')) return { path: args.path, external: true };
      const resolved = await b.resolve(args.path, {
        kind: args.kind,
        resolveDir: args.resolveDir,
        importer: args.importer,
        pluginData: 'resolving',
      });
      if (resolved.errors.length > 0) return { errors: resolved.errors };
      return { path: resolved.path, external: true };
    });
  },
};

/** The bundled worker's path (built at the first call of this process). */
export function workerBundle(): Promise<string> {
  bundled ??= (async () => {
    const dir = join(tmpdir(), 'duetime-reliability');
    mkdirSync(dir, { recursive: true });
    const outfile = join(dir, `worker-${process.pid}.mjs`);
    await build({
      entryPoints: [entry],
      outfile,
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      conditions: ['source'],
      plugins: [externals],
      logLevel: 'error',
    });
    return outfile;
  })();
  return bundled;
}

/** A worker process of the suite: the conformance suite's watched child, with its role and pid. */
export interface Worker extends WorkerProcess {
  readonly role: string;
  readonly pid: number;
}

/** Starts `role` of the worker (src/worker.ts) with `args`. */
export async function spawnWorker(role: string, args: Record<string, unknown>): Promise<Worker> {
  const bundle = await workerBundle();
  const child = spawn(process.execPath, [bundle, role, JSON.stringify(args)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env },
  });
  const watched = watchChild(child, {
    label: `worker ${role}`,
    lineTimeoutMs: 60_000,
    stopTimeoutMs: 30_000,
    stderrChars: 6000,
  });
  return Object.assign(watched, { role, pid: child.pid ?? -1 });
}
