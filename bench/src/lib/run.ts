import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { sleep as sleepOn, systemClock } from '@duetime/core';

/** Settings shared by every workload of one `pnpm bench` run. */
export interface BenchContext {
  /** `--quick`: every workload runs, on smaller counts and shorter windows. */
  quick: boolean;
  rounds: number;
  log(line: string): void;
}

/**
 * Runs `measure` for each subject in turn, round after round (A B C A B C …), so drift in the machine's
 * state spreads over all subjects instead of favouring one. With `rotate`, each round starts one subject
 * later (A B C, B C A, C A B, …), so no subject always runs first in its round.
 */
export async function alternate<S extends { name: string }, T>(
  ctx: BenchContext,
  subjects: S[],
  label: string,
  measure: (subject: S, round: number) => Promise<T>,
  failed: T,
  options: { rotate?: boolean } = {},
): Promise<Map<string, T[]>> {
  const results = new Map<string, T[]>(subjects.map((s) => [s.name, []]));
  for (let round = 0; round < ctx.rounds; round++) {
    const shift = options.rotate && subjects.length > 0 ? round % subjects.length : 0;
    for (const subject of [...subjects.slice(shift), ...subjects.slice(0, shift)]) {
      let value: T;
      try {
        value = await measure(subject, round);
      } catch (error) {
        // A subject that cannot finish a round is reported as such (n/a), not dropped, and the run goes on.
        ctx.log(
          `  ${label} round ${round + 1}/${ctx.rounds} ${subject.name}: FAILED ${(error as Error).message}`,
        );
        value = failed;
      }
      results.get(subject.name)!.push(value);
      ctx.log(`  ${label} round ${round + 1}/${ctx.rounds} ${subject.name}: ${JSON.stringify(value)}`);
    }
  }
  return results;
}

/**
 * Runs `measure` for every subject at once, round after round, for measurements that are a stretch of
 * wall-clock time (the recurring workload's quick mode), where taking turns would multiply it by the
 * number of subjects. The subjects share the machine meanwhile, so each one's figures include the others'
 * load: for a quick look, not for comparison.
 */
export async function together<S extends { name: string }, T>(
  ctx: BenchContext,
  subjects: S[],
  label: string,
  measure: (subject: S, round: number) => Promise<T>,
  failed: T,
): Promise<Map<string, T[]>> {
  const results = new Map<string, T[]>(subjects.map((s) => [s.name, []]));
  for (let round = 0; round < ctx.rounds; round++) {
    const values = await Promise.all(
      subjects.map((subject) =>
        measure(subject, round).catch((error: Error) => {
          ctx.log(`  ${label} round ${round + 1}/${ctx.rounds} ${subject.name}: FAILED ${error.message}`);
          return failed;
        }),
      ),
    );
    subjects.forEach((subject, i) => {
      results.get(subject.name)!.push(values[i]!);
      ctx.log(`  ${label} round ${round + 1}/${ctx.rounds} ${subject.name}: ${JSON.stringify(values[i])}`);
    });
  }
  return results;
}

const require = createRequire(import.meta.url);
const childEntry = fileURLToPath(new URL('./child.ts', import.meta.url));

/** Starts `script` (a TypeScript file) in a fresh Node process that resolves workspace sources. */
export function spawnTs(
  script: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv; stdout?: 'pipe' | 'inherit' } = {},
): ChildProcess {
  return spawn(
    process.execPath,
    [
      '--import',
      pathToFileURL(require.resolve('tsx')).href,
      '--conditions=source',
      '--expose-gc',
      script,
      ...args,
    ],
    {
      stdio: ['ignore', options.stdout ?? 'pipe', 'inherit'],
      env: options.env ? { ...process.env, ...options.env } : process.env,
    },
  );
}

/** Starts `task` of lib/child.ts in a fresh process (its stdout piped). */
export function spawnChild(task: string, args: unknown, env?: NodeJS.ProcessEnv): ChildProcess {
  return spawnTs(childEntry, [task, JSON.stringify(args)], env ? { env } : {});
}

/**
 * Runs `task` from lib/child.ts in a fresh Node process (for CPU and RSS figures of one library alone) and
 * resolves to the JSON it prints last.
 */
export function inChild<T>(task: string, args: unknown, env?: NodeJS.ProcessEnv): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawnChild(task, args, env);
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    child.once('exit', (code) => {
      const line = out.trim().split('\n').at(-1) ?? '';
      if (code !== 0)
        return reject(
          new Error(
            line.startsWith('FAILED ')
              ? line.slice('FAILED '.length)
              : `bench child ${task} exited with ${code}: ${out.slice(-500)}`,
          ),
        );
      try {
        resolve(JSON.parse(line) as T);
      } catch {
        reject(new Error(`bench child ${task} printed no result: ${out.slice(-500)}`));
      }
    });
  });
}

/** Polls until `done()` or the deadline; returns false on timeout. */
export async function until(done: () => boolean, timeoutMs: number, intervalMs = 5): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) return false;
    await sleep(intervalMs);
  }
  return true;
}

/** Waits `ms` of real time. */
export async function sleep(ms: number): Promise<void> {
  await sleepOn(systemClock, ms);
}

/** RSS of this process in MB, one decimal. */
export function rssMb(): number {
  return Math.round((process.memoryUsage().rss / 1048576) * 10) / 10;
}
