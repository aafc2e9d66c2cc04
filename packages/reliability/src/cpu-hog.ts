import { type ChildProcess, spawn } from 'node:child_process';
import { availableParallelism } from 'node:os';

/**
 * A loop that keeps a core busy and ends once its parent is gone (a loop stopped by a signal would
 * otherwise leave it running, and every later measurement on the machine with it).
 */
const BUSY_LOOP =
  'const parent = Number(process.argv[1]); for (let i = 0; ; i++) if ((i & 0xfffff) === 0 && process.ppid !== parent) process.exit(0);';

/**
 * Saturates the CPU with busy-looping child processes (one per core unless told), at the priority of this
 * process, so that timers, I/O callbacks and replies come late, as on an overloaded host. Returns how to
 * stop them; stopping waits until every one has exited.
 */
export function saturateCpu(count = availableParallelism()): () => Promise<void> {
  const children: ChildProcess[] = [];
  for (let i = 0; i < count; i++)
    children.push(spawn(process.execPath, ['-e', BUSY_LOOP, String(process.pid)], { stdio: 'ignore' }));
  return async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            child.kill('SIGKILL');
          }),
      ),
    );
  };
}
