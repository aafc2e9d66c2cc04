import { mkdir, readdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Backend, CommonBackendOptions } from '@duetime/core';
import { BackendError, defineBackend, InvalidArgumentError } from '@duetime/core';
import { dataFile } from './data.js';
import { fileCursors, fileLeases } from './leases.js';
import { isAlive } from './lock.js';
import { fileStore } from './store.js';

export interface FileBackendOptions extends CommonBackendOptions {
  /** How long an operation waits for another process holding the directory's lock, in ms (default 10,000). */
  lockTimeoutMs?: number;
  /**
   * How long a delivery's claim holds without renewal, in ms (default 30,000; core renews it every third
   * of this while the delivery runs). A claim whose process died lapses at once; one whose process hangs
   * lapses after this, and its schedules are then delivered again, the hung attempt counted as a crash.
   */
  claimLapseMs?: number;
}

/** A backend over a directory, with its public field. */
export type FileBackend = Backend<undefined> & { readonly directory: string };

/**
 * A duetime backend over a directory on this host: one JSON file every process opening the directory
 * shares (see `DataFile`). `directory` is created when missing.
 *
 * @example
 * const backend = await createFileBackend('/var/lib/my-app/duetime', { claimLapseMs: 10_000 });
 */
export const createFileBackend: (directory: string, options?: FileBackendOptions) => Promise<FileBackend> =
  defineBackend({
    name: 'file',
    factory: 'createFileBackend',
    options: (read) => ({
      lockTimeoutMs: read.duration('lockTimeoutMs', 10_000),
      claimLapseMs: read.duration('claimLapseMs', 30_000),
    }),
    async open(target: string, context) {
      if (typeof target !== 'string' || target === '')
        throw new InvalidArgumentError('directory', target, 'must be a non-empty path');
      const directory = resolve(target);
      try {
        await mkdir(directory, { recursive: true });
        // Lock directories and temporary files of processes that are gone.
        for (const name of await readdir(directory)) {
          const pid = /^\.(?:lock|state)-(\d+)-/.exec(name)?.[1];
          if (pid !== undefined && !isAlive(Number(pid)))
            await rm(join(directory, name), { recursive: true, force: true });
        }
      } catch (error) {
        throw new BackendError('open', `${directory}: ${(error as Error).message}`, { cause: error });
      }
      const { lockTimeoutMs, claimLapseMs } = context.options;
      const file = dataFile(directory, lockTimeoutMs);
      await file.read(); // a file that holds something else fails here, with a CorruptDataError
      return {
        store: fileStore(file, context.clock, claimLapseMs),
        leases: fileLeases(file, context.clock),
        cursors: fileCursors(file, context.clock),
        capabilities: { multiProcess: true, durable: true, sql: false, exclusiveClaims: false },
        describe: `file backend in ${directory}`,
        extra: { directory },
      };
    },
  });
