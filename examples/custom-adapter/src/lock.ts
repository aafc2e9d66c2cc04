import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rmdir, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BackendError } from '@duetime/core';

/** This process as a lock holder: its pid (so others can tell whether it still lives) and a nonce. */
export const HOLDER = `${process.pid}-${randomBytes(4).toString('hex')}`;

/** Whether process `pid` is alive on this host. */
export function isAlive(pid: number): boolean {
  try {
    return process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Callers in this process queue here per directory, so only one of them at a time asks the file system. */
const queues = new Map<string, Promise<unknown>>();

/**
 * Runs `fn` holding the exclusive lock of `dir`, shared by every process on this host.
 *
 * The lock is the directory `<dir>/lock`, holding one file named after its holder. A process takes it by
 * renaming its own ready-made directory `.lock-<holder>` to `lock` (a rename onto a directory that is
 * not empty fails, so one process wins) and lets go by renaming it back. A holder that died leaves its
 * file behind: a waiter that finds the holder's pid dead deletes that file by its unique name, then the
 * directory if it is empty. So breaking a stale lock never removes a live one, even when breakers and a
 * new holder race (the flaw of "create a lock file, delete it when it looks old").
 */
export function withLock<T>(dir: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
  const run = (queues.get(dir) ?? Promise.resolve()).then(async () => {
    const own = join(dir, `.lock-${HOLDER}`);
    const lock = join(dir, 'lock');
    await mkdir(own, { recursive: true });
    await writeFile(join(own, HOLDER), '');
    for (let pause = 1, deadline = Date.now() + timeoutMs; ; pause = Math.min(pause * 2, 20)) {
      const taken = await rename(own, lock).then(
        () => true,
        (error: NodeJS.ErrnoException) => {
          if (error.code === 'ENOTEMPTY' || error.code === 'EEXIST') return false;
          throw new BackendError('lock', `cannot take ${lock}: ${error.message}`, { cause: error });
        },
      );
      if (taken) break;
      const [holder] = await readdir(lock).catch(() => [] as string[]);
      if (holder !== undefined && !isAlive(Number.parseInt(holder, 10))) {
        await unlink(join(lock, holder)).catch(() => {});
        await rmdir(lock).catch(() => {}); // fails, as it should, when a new holder moved in meanwhile
      } else if (Date.now() > deadline)
        throw new BackendError('lock', `${lock} held by process ${holder} for over ${timeoutMs} ms`, {
          transient: true,
        });
      else await new Promise((resolve) => setTimeout(resolve, pause));
    }
    try {
      return await fn();
    } finally {
      await rename(lock, own);
    }
  });
  const settled = run.catch(() => undefined);
  queues.set(dir, settled);
  return run;
}
