import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, rmdir, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BackendError, ClosedError, sleep, systemClock } from '@duetime/core';
import { fsError, hasCode } from './errors.js';

/** Runs async functions one at a time, in call order. */
export class Mutex {
  #tail: Promise<unknown> = Promise.resolve();

  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(fn);
    this.#tail = result.catch(() => {});
    return result;
  }
}

/** Whether a process with this id exists on this host (`EPERM`: it exists but belongs to someone else). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return hasCode(error, 'EPERM');
  }
}

/** The process id in a name made by {@link ownerName} (`<pid>-<nonce>`, after an optional prefix). */
export function ownerPid(name: string, prefix = ''): number | undefined {
  if (!name.startsWith(prefix)) return undefined;
  const pid = Number.parseInt(name.slice(prefix.length), 10);
  return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
}

/** A name no other holder, past or future, can have: this process's id and a random nonce. */
export function ownerName(): string {
  return `${process.pid}-${randomBytes(6).toString('hex')}`;
}

/** Staging directories are named `lock-<pid>-<nonce>`; leftovers of dead processes are removed on open. */
export const STAGING_PREFIX = 'lock-';

/**
 * Same-process callers queue on one mutex per lock path instead of polling the file system against each
 * other: several backend instances in one process (the conformance suite opens four) take turns at once.
 */
const queues = new Map<string, Mutex>();

/**
 * A cross-process lock on a directory, with a stale-lock rule: a holder whose process is gone loses it.
 *
 * The lock is the directory `<dir>/lock` holding one file named after its holder (`<pid>-<nonce>`).
 * - Acquire: `rename` the holder's private directory `lock-<pid>-<nonce>` (made once, with its owner file
 *   inside) to `lock`. A rename onto a directory that is not empty fails, so at most one holder wins; the
 *   lock appears fully formed, with its owner inside, and never exists without one.
 * - Release: `rename` it back to the private name: the lock disappears in one step.
 * - Stale: when the holder's process is dead, delete its owner file (its name is unique to that holder)
 *   and then `rmdir` the lock, which only succeeds on an empty directory. A live holder's lock always holds
 *   its owner file, so two breakers racing, or a breaker racing a new holder, can never remove a live lock:
 *   the classic O_EXCL lock file has no such guarantee, because `unlink` deletes whatever file is there.
 *
 * Limits: every process must be on this host (pids are compared), and a dead holder whose pid was reused
 * by a live process looks alive until that process exits (waiters then time out with a BackendError).
 */
export class DirectoryLock {
  readonly path: string;
  readonly #owner = ownerName();
  readonly #staging: string;
  readonly #timeoutMs: number;
  #prepared = false;
  #closed = false;

  constructor(dir: string, timeoutMs: number) {
    this.path = join(dir, 'lock');
    this.#staging = join(dir, `${STAGING_PREFIX}${this.#owner}`);
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Waits for this process's turn (same-process callers go one at a time), then runs `fn`, which calls
   * `hold` for the part that needs the cross-process lock. Work that turns out not to need it (a decision
   * that can be made from a read) skips the file system's lock altogether.
   */
  turn<T>(fn: (hold: <U>(critical: () => Promise<U>) => Promise<U>) => Promise<T>): Promise<T> {
    return this.#queue().run(async () => {
      if (this.#closed) throw new ClosedError(`lock ${this.path}`);
      return fn(async (critical) => {
        await this.#acquire();
        try {
          return await critical();
        } finally {
          await this.#release();
        }
      });
    });
  }

  /** Removes the private directory, after any acquisition queued before. */
  close(): Promise<void> {
    return this.#queue().run(async () => {
      this.#closed = true;
      await rm(this.#staging, { recursive: true, force: true });
    });
  }

  #queue(): Mutex {
    let queue = queues.get(this.path);
    if (!queue) {
      queue = new Mutex();
      queues.set(this.path, queue);
    }
    return queue;
  }

  async #acquire(): Promise<void> {
    if (!this.#prepared) {
      try {
        await mkdir(this.#staging);
        await writeFile(join(this.#staging, this.#owner), '');
      } catch (error) {
        throw fsError('prepare lock', this.#staging, error);
      }
      this.#prepared = true;
    }
    const deadline = Date.now() + this.#timeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        await rename(this.#staging, this.path);
        return;
      } catch (error) {
        if (!hasCode(error, 'ENOTEMPTY', 'EEXIST')) {
          // Our private directory vanished (someone cleaned the directory): make it again next time.
          if (hasCode(error, 'ENOENT')) this.#prepared = false;
          throw fsError('acquire lock', this.path, error);
        }
      }
      const holder = await this.#judge();
      if (holder === undefined) continue;
      if (Date.now() > deadline)
        throw new BackendError(
          `acquire lock (${this.path})`,
          `held by live process ${holder} for more than ${this.#timeoutMs} ms`,
          { transient: true },
        );
      await sleep(systemClock, Math.min(1 + attempt, 20) * (0.5 + Math.random()));
    }
  }

  async #release(): Promise<void> {
    try {
      await rename(this.path, this.#staging);
    } catch (error) {
      throw fsError('release lock', this.path, error);
    }
  }

  /** Returns the live holder's pid, or undefined after finding the lock free or breaking a stale one. */
  async #judge(): Promise<number | undefined> {
    let owners: string[];
    try {
      owners = await readdir(this.path);
    } catch (error) {
      if (hasCode(error, 'ENOENT', 'ENOTDIR')) return undefined;
      throw fsError('read lock', this.path, error);
    }
    for (const name of owners) {
      const pid = ownerPid(name);
      if (pid !== undefined && isAlive(pid)) return pid;
    }
    // Held by a dead process, or empty (a breaker is halfway through).
    try {
      for (const name of owners) await unlink(join(this.path, name)).catch(ignore('ENOENT'));
      await rmdir(this.path).catch(ignore('ENOENT', 'ENOTEMPTY', 'EEXIST'));
    } catch (error) {
      throw fsError('break stale lock', this.path, error);
    }
    return undefined;
  }
}

function ignore(...codes: string[]): (error: unknown) => void {
  return (error) => {
    if (!hasCode(error, ...codes)) throw error;
  };
}
