import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { WorkerProcess } from '@duetime/conformance';
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

/** A worker process with the last of its standard error kept for failure messages. */
export interface Worker extends WorkerProcess {
  readonly role: string;
  readonly pid: number;
  /** The last few kilobytes of standard error. */
  stderr(): string;
  /** Whether it is still running (not exited, not killed). */
  alive(): boolean;
}

/** Starts `role` of the worker (src/worker.ts) with `args`. */
export async function spawnWorker(role: string, args: Record<string, unknown>): Promise<Worker> {
  const bundle = await workerBundle();
  const child = spawn(process.execPath, [bundle, role, JSON.stringify(args)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env },
  });
  return wrap(role, child);
}

function wrap(role: string, child: ChildProcess): Worker {
  const lines: string[] = [];
  const waiters: { pattern: RegExp; resolve: (line: string) => void }[] = [];
  let buffer = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 1);
      lines.push(line);
      for (const w of [...waiters])
        if (w.pattern.test(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
    }
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-6000);
  });
  let exitedFlag = false;
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      exitedFlag = true;
      resolve(code);
    }),
  );
  return {
    role,
    pid: child.pid ?? -1,
    child,
    lines,
    exited,
    stderr: () => stderr,
    alive: () => !exitedFlag && child.exitCode === null && child.signalCode === null,
    line(pattern, timeoutMs = 60_000) {
      const seen = lines.find((l) => pattern.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = {
          pattern,
          resolve: (line: string) => {
            clearTimeout(timer);
            resolve(line);
          },
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(
            new Error(
              `worker ${role} printed no line matching ${pattern} in ${timeoutMs} ms; stderr: ${stderr}`,
            ),
          );
        }, timeoutMs);
        waiters.push(waiter);
        void exited.then((code) => {
          if (!waiters.includes(waiter)) return;
          waiters.splice(waiters.indexOf(waiter), 1);
          clearTimeout(timer);
          reject(new Error(`worker ${role} exited (${code}) before printing ${pattern}; stderr: ${stderr}`));
        });
      });
    },
    async kill() {
      if (!exitedFlag && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
    async stop(timeoutMs = 30_000) {
      if (exitedFlag || child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
