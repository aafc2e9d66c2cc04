import { createHash } from 'node:crypto';
import { constants, type FSWatcher, watch } from 'node:fs';
import { type FileHandle, mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ClosedError, CorruptDataError, type Logger } from '@duetime/core';
import { fsError, hasCode } from './errors.js';
import { DirectoryLock, isAlive, Mutex, ownerName, ownerPid, STAGING_PREFIX } from './lock.js';

/**
 * The in-memory state a journal keeps up to date: it is rebuilt from the file by `restore` (from the
 * snapshot a compacted file starts with, or from nothing) followed by `apply` for every later record.
 */
export interface Replica<R, S> {
  restore(snapshot: S | undefined): void;
  /** Applies one record; `remote` when another instance (or process) wrote it. */
  apply(record: R, remote: boolean): void;
  /** The whole state as one snapshot, for compaction. */
  snapshot(): S;
}

export interface JournalOptions {
  /** How long to wait for another process's lock before failing with a transient BackendError. */
  lockTimeoutMs: number;
  /** Rewrite the journal as one snapshot once it has grown by this many bytes since the last one. */
  compactBytes: number;
  logger: Logger;
}

/** One line: a checksum of the JSON text, a space, the JSON text. `s` marks a snapshot, `r` a record. */
type Line<R, S> = { s: S } | { r: R };

const FILE = 'journal.jsonl';
const TEMP_PREFIX = 'journal-';

/**
 * An append-only JSON-lines file shared by processes, with an in-memory replica per instance.
 *
 * - Reads catch up first: they read the bytes appended since the last look and apply every complete line.
 * - Writes take the directory lock, catch up, let the caller decide on the current state, append one line
 *   and `fdatasync` it, and only then apply it. One commit is one line, so it is in the file whole or not at
 *   all: a crash mid-write leaves an incomplete last line, which readers ignore and the next writer cuts off.
 * - A complete line whose checksum does not match is corruption (a crash never makes one): it is refused
 *   with a CorruptDataError instead of being cut off, so nothing after it is ever lost silently.
 * - Compaction writes the whole state as one line to a temporary file, fsyncs it and renames it over the
 *   journal: readers see either the old file or the new one, and notice the new one by its inode.
 */
export class Journal<R, S> {
  readonly path: string;
  readonly #dir: string;
  readonly #replica: Replica<R, S>;
  readonly #options: JournalOptions;
  readonly #lock: DirectoryLock;
  /** Orders this instance's catch-ups and appends, so that no line is applied twice. */
  readonly #mutex = new Mutex();
  readonly #watchers = new Set<FSWatcher>();
  #file: FileHandle | undefined;
  #inode = -1;
  /** Bytes of the file applied so far: always the end of a complete line. */
  #offset = 0;
  #snapshotBytes = 0;
  #closed = false;

  private constructor(dir: string, replica: Replica<R, S>, options: JournalOptions) {
    this.#dir = dir;
    this.path = join(dir, FILE);
    this.#replica = replica;
    this.#options = options;
    this.#lock = new DirectoryLock(dir, options.lockTimeoutMs);
  }

  /** Opens (creating when needed) the journal in `dir` and loads it into `replica`. */
  static async open<R, S>(
    dir: string,
    replica: Replica<R, S>,
    options: JournalOptions,
  ): Promise<Journal<R, S>> {
    const journal = new Journal(dir, replica, options);
    try {
      await mkdir(dir, { recursive: true });
      await journal.#removeLeftovers();
      const created = await open(journal.path, constants.O_RDWR | constants.O_CREAT, 0o644);
      await created.close();
    } catch (error) {
      throw fsError('open journal', journal.path, error);
    }
    try {
      await journal.read(() => undefined);
    } catch (error) {
      await journal.close();
      throw error;
    }
    return journal;
  }

  /** Catches up with the file, then runs `fn` on the replica. */
  read<T>(fn: () => T): Promise<T> {
    return this.#mutex.run(async () => {
      this.#check();
      await this.#catchUp();
      return fn();
    });
  }

  /**
   * Under the lock, with the replica caught up, `decide` returns the record to append (if any) and the
   * result. The record is durable and applied before the returned promise resolves.
   *
   * `decide` must only read the replica: it runs once without the lock first, when this process's turn
   * comes. A refusal or a conflict found then is final (it was decided on committed state) and costs no
   * lock; same-process writers queued ahead have just committed, so most races between them end there.
   */
  async write<T>(decide: () => { record?: R; result: T }): Promise<T> {
    this.#check();
    return this.#lock.turn(async (hold) => {
      const early = await this.read(decide);
      if (early.record === undefined) return early.result;
      return hold(() =>
        this.#mutex.run(async () => {
          this.#check();
          const size = await this.#catchUp();
          if (size > this.#offset) await this.#cutTornTail();
          const { record, result } = decide();
          if (record !== undefined) {
            await this.#append({ r: record });
            await this.#compactIfGrown();
          }
          return result;
        }),
      );
    });
  }

  /**
   * Calls `onChange` when the journal file changes (another instance appended or compacted). A hint only:
   * file-system events can be coalesced or lost, which is why the dispatcher also rescans.
   */
  watch(onChange: () => void): () => void {
    this.#check();
    let watcher: FSWatcher;
    try {
      watcher = watch(this.#dir, { persistent: false }, (_event, name) => {
        if (name === FILE) onChange();
      });
    } catch (error) {
      // Out of inotify watches, say: the rescan still finds the changes, later.
      this.#options.logger.warn('cannot watch the journal; relying on rescans', { path: this.path, error });
      return () => {};
    }
    watcher.on('error', (error) => {
      this.#watchers.delete(watcher);
      watcher.close();
      this.#options.logger.warn('stopped watching the journal; relying on rescans', {
        path: this.path,
        error,
      });
    });
    this.#watchers.add(watcher);
    return () => {
      this.#watchers.delete(watcher);
      watcher.close();
    };
  }

  /** Closes the file and stops watching. Idempotent. */
  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    for (const watcher of this.#watchers) watcher.close();
    this.#watchers.clear();
    // The lock first: writes queued before this close end (with a ClosedError) before it is removed.
    return this.#lock.close().then(() =>
      this.#mutex.run(async () => {
        await this.#file?.close();
        this.#file = undefined;
      }),
    );
  }

  #check(): void {
    if (this.#closed) throw new ClosedError(`file journal ${this.path}`);
  }

  /** Applies the lines appended since the last look; returns the file's size (past the last line if torn). */
  async #catchUp(): Promise<number> {
    try {
      // The path's inode says whether a compaction replaced the file; when not, its size is our file's.
      let { ino, size } = await stat(this.path);
      if (!this.#file || ino !== this.#inode) {
        await this.#reopen();
        ({ ino, size } = await this.#file!.stat());
        this.#inode = ino;
      }
      if (size > this.#offset) await this.#applyFrom(this.#offset, size);
      return size;
    } catch (error) {
      throw error instanceof CorruptDataError ? error : fsError('read journal', this.path, error);
    }
  }

  /** (Re)opens the file at the path: a new file, or a compacted one replacing the file this instance had. */
  async #reopen(): Promise<void> {
    const previous = this.#file;
    this.#file = undefined;
    await previous?.close();
    this.#file = await open(this.path, constants.O_RDWR);
    this.#offset = 0;
    this.#snapshotBytes = 0;
    this.#replica.restore(undefined);
  }

  async #applyFrom(start: number, end: number): Promise<void> {
    const bytes = Buffer.allocUnsafe(end - start);
    const { bytesRead } = await this.#file!.read(bytes, 0, bytes.length, start);
    let from = 0;
    for (let newline = bytes.indexOf(0x0a); newline >= 0 && newline < bytesRead; ) {
      const line = decode<R, S>(bytes.subarray(from, newline));
      if (line === undefined)
        throw new CorruptDataError(
          `${this.path}: the line at byte ${start + from} fails its checksum; refusing to guess what it held`,
        );
      if ('s' in line) {
        if (start + from !== 0)
          throw new CorruptDataError(`${this.path}: a snapshot at byte ${start + from}, not at the start`);
        this.#replica.restore(line.s);
        this.#snapshotBytes = newline + 1;
      } else {
        this.#replica.apply(line.r, true);
      }
      from = newline + 1;
      this.#offset = start + from;
      newline = bytes.indexOf(0x0a, from);
    }
  }

  /** Bytes past the last complete line, under the lock, are a write torn by a crash: cut them off. */
  async #cutTornTail(): Promise<void> {
    try {
      await this.#file!.truncate(this.#offset);
    } catch (error) {
      throw fsError('truncate torn journal tail', this.path, error);
    }
  }

  async #append(line: Line<R, S>): Promise<void> {
    const file = this.#file!;
    const bytes = encode(line);
    try {
      await writeAll(file, bytes, this.#offset);
      await file.datasync();
    } catch (error) {
      // Leave no partial line behind for the next writer to cut off.
      await file.truncate(this.#offset).catch(() => {});
      throw fsError('append to journal', this.path, error);
    }
    this.#offset += bytes.length;
    // Apply what was written, read back, so that this instance's state is exactly what replay builds.
    this.#replica.apply((decode<R, S>(bytes.subarray(0, -1)) as { r: R }).r, false);
  }

  async #compactIfGrown(): Promise<void> {
    const grown = this.#offset - this.#snapshotBytes;
    if (grown < this.#options.compactBytes || this.#offset < 2 * this.#snapshotBytes) return;
    const temp = join(this.#dir, `${TEMP_PREFIX}${ownerName()}.tmp`);
    try {
      const bytes = encode<R, S>({ s: this.#replica.snapshot() });
      const file = await open(temp, 'wx');
      try {
        await writeAll(file, bytes, 0);
        await file.datasync();
      } finally {
        await file.close();
      }
      await rename(temp, this.path);
      await syncDirectory(this.#dir);
      await this.#file?.close();
      this.#file = await open(this.path, constants.O_RDWR);
      this.#inode = (await this.#file.stat()).ino;
      this.#offset = bytes.length;
      this.#snapshotBytes = bytes.length;
    } catch (error) {
      // The commit itself is durable already, so this is not its failure. Whether or not the rename
      // happened, reading the file at the path again from the start gives the right state.
      await rm(temp, { force: true }).catch(() => {});
      this.#options.logger.warn('journal compaction failed', { path: this.path, error });
      await this.#file?.close().catch(() => {});
      this.#file = undefined;
    }
  }

  /** Staging directories and temporary files of processes that died before cleaning up. */
  async #removeLeftovers(): Promise<void> {
    for (const name of await readdir(this.#dir)) {
      const pid = ownerPid(name, STAGING_PREFIX) ?? ownerPid(name, TEMP_PREFIX);
      if (pid !== undefined && !isAlive(pid))
        await rm(join(this.#dir, name), { recursive: true, force: true });
    }
  }
}

function checksum(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}

function encode<R, S>(line: Line<R, S>): Buffer {
  const json = JSON.stringify(line);
  return Buffer.from(`${checksum(json)} ${json}\n`);
}

/** The line's content, or undefined when it does not match its checksum. */
function decode<R, S>(bytes: Buffer): Line<R, S> | undefined {
  const text = bytes.toString('utf8');
  const space = text.indexOf(' ');
  const json = text.slice(space + 1);
  if (space !== 16 || checksum(json) !== text.slice(0, space)) return undefined;
  return JSON.parse(json) as Line<R, S>;
}

async function writeAll(file: FileHandle, bytes: Buffer, position: number): Promise<void> {
  for (let done = 0; done < bytes.length; ) {
    const { bytesWritten } = await file.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

/** Makes a rename in `dir` durable (on Linux a directory can be opened and fsynced). */
async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } catch (error) {
    if (!hasCode(error, 'EINVAL', 'EISDIR', 'EPERM')) throw error;
  } finally {
    await handle.close();
  }
}
