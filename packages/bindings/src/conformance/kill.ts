import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { expect, it } from 'vitest';
import { dispatchUntil, keysIn } from './server.js';
import type { BindingConformanceOptions, GroupContext } from './types.js';

/**
 * How long the killed process's claim lasts unrenewed: the time the next dispatcher waits before it may
 * deliver the schedule again. Renewed every third of it while the process lives.
 */
export const KILLED_CLAIM_TIMEOUT_MS = 500;

/** What the child process is told (`worker.ts`). */
export interface WorkerArgs {
  module: string;
  exportName: string;
  url: string;
  schema: string;
  key: string;
  claimTimeoutMs: number;
}

/**
 * A processor SIGKILLed inside its delivery, after its write through the library and before the commit:
 * nothing of the write is committed, the schedule stays as it was, and the next dispatcher delivers it
 * again (the attempt counted as interrupted), its row then written exactly once.
 */
export function killTests({ target, server, options }: GroupContext): void {
  it('commits nothing of a processor SIGKILLed after its write, and delivers it again: its row exactly once', async () => {
    if (!options.module)
      throw new Error(
        `bindingConformance(${target.name}): the kill test runs the target in a child process; give \`module\` (the module exporting the target)`,
      );
    const key = 'killed/1';
    const store = server.backend.store;
    await store.transact((tx) => tx.schedule(key, new Date(Date.now() - 1000), { type: 'effect' }));
    const before = await store.loadSchedule(key);
    const worker = startWorker(options, {
      module: moduleUrl(options.module),
      exportName: options.exportName ?? 'target',
      url: server.url,
      schema: server.schema,
      key,
      claimTimeoutMs: KILLED_CLAIM_TIMEOUT_MS,
    });
    try {
      await worker.line(/^IN_PROCESSOR /, 30_000);
      // Written, not committed: nothing of it is visible outside the delivery.
      expect(await keysIn(server, 'effects', 'killed/')).toEqual([]);
    } finally {
      worker.child.kill('SIGKILL');
      await worker.exited;
    }
    expect(worker.child.signalCode, worker.stderr()).toBe('SIGKILL');
    // The kill changes nothing a reader sees: the delivery never committed.
    const after = await store.loadSchedule(key);
    expect({ version: after?.version, attempts: after?.attempts }).toEqual({
      version: before!.version,
      attempts: 0,
    });
    expect(await keysIn(server, 'effects', 'killed/')).toEqual([]);

    // Once the killed claim lapses, a fresh dispatcher delivers it again, through the library.
    const seen: { attempts: number; lastError: string | undefined }[] = [];
    const failed: string[] = [];
    await dispatchUntil(
      server.backend,
      {
        retryDelay: 10,
        processor: async (tx, _message, { schedule }) => {
          if (schedule.key !== key) return;
          seen.push({ attempts: schedule.attempts, lastError: schedule.lastError });
          await target.write!(server.library, tx.sql, key);
        },
      },
      async () => (await store.countSchedules({ prefix: 'killed/' })) === 0,
      { failed },
    );
    expect(await keysIn(server, 'effects', 'killed/')).toEqual([key]);
    // One run, seeing the crash counted as an attempt; nothing failed but the interrupted delivery.
    expect(seen).toEqual([{ attempts: 1, lastError: expect.stringMatching(/^DeliveryInterruptedError: /) }]);
    expect(failed).toEqual([`${key} DeliveryInterruptedError`]);
  }, 60_000);
}

function moduleUrl(module: string | URL): string {
  if (module instanceof URL) return module.href;
  return module.startsWith('file:') ? module : pathToFileURL(module).href;
}

/** A running worker: the lines it printed, waits for one, its exit, the tail of its stderr. */
interface Worker {
  child: ChildProcess;
  line(pattern: RegExp, timeoutMs: number): Promise<string>;
  exited: Promise<void>;
  stderr(): string;
}

const fromSources = import.meta.url.endsWith('.ts');
const workerPath = fileURLToPath(new URL(fromSources ? './worker.ts' : './worker.js', import.meta.url));

/** Starts `worker.ts` in a child process (with tsx's loader when a module to load is TypeScript). */
function startWorker(options: BindingConformanceOptions, args: WorkerArgs): Worker {
  const flags: string[] = [];
  if (fromSources || /\.[cm]?tsx?$/.test(new URL(args.module).pathname)) {
    let tsx: string;
    try {
      tsx = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
    } catch {
      throw new Error(`bindingConformance: ${String(options.module)} is TypeScript; install tsx to load it`);
    }
    flags.push('--import', tsx);
  }
  // In this repository, workspace packages resolve to their sources.
  if (fromSources) flags.push('--conditions=source');
  const child = spawn(process.execPath, [...flags, workerPath, JSON.stringify(args)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let buffer = '';
  let stderr = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
      lines.push(buffer.slice(0, i));
      buffer = buffer.slice(i + 1);
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  return {
    child,
    exited,
    stderr: () => stderr,
    async line(pattern, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = lines.find((l) => pattern.test(l));
        if (found !== undefined) return found;
        if (gone) throw new Error(`the worker exited before printing ${pattern}; stderr: ${stderr}`);
        if (Date.now() > deadline)
          throw new Error(
            `the worker printed no line matching ${pattern} in ${timeoutMs} ms; stderr: ${stderr}`,
          );
        await new Promise((r) => setTimeout(r, 5));
      }
    },
  };
}
