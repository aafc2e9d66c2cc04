import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Backend, BackendCapabilities } from '@duetime/core';
import { type WorkerProcess, watchChild } from './child-process.js';

/** What the suite runs against. */
export interface ConformanceTarget {
  /** Shown in test names, e.g. `sqlite`. */
  name: string;
  /**
   * Opens a backend on the data named by `namespace`. A new namespace must give empty, isolated data; the
   * same namespace again must give another instance on the same data (as a second process would). The
   * suite closes every backend it opens.
   */
  open(namespace: string): Promise<Backend>;
  /**
   * A module (path or URL; `.ts` works) exporting the same `open(namespace)` function, for the tests that
   * run backends in child processes and kill them. Required unless the backend declares
   * `multiProcess: false`.
   */
  module?: string | URL;
  /**
   * Overrides what the backend declares in `backend.capabilities`, and declares what only the suite asks
   * about (`dueOrder`, `pushChannel`; see {@link ConformanceCapabilities}).
   */
  capabilities?: ConformanceCapabilities;
  /**
   * Deletes the data of `namespace` (its schema, tables, keys or streams). When given, the suite calls it
   * after each test for every namespace the test used, once its backends are closed and its processes
   * stopped, so a run leaves nothing behind. Errors are reported as test failures.
   */
  drop?(namespace: string): Promise<void>;
  /**
   * For backends that declare `sql` (the application's own queries join `tx.sql`): how the suite writes and
   * reads a row of its own, to check that a processor's SQL commits and rolls back with its part.
   */
  sql?: SqlProbe;
}

/**
 * Writes and reads rows of the suite's own through a backend's SQL handle (see {@link ConformanceTarget.sql}).
 *
 * @example
 * // PostgreSQL, where `tx.sql` is a pg client inside the transaction:
 * const probe: SqlProbe = {
 *   setup: (backend) => adminQuery('CREATE TABLE IF NOT EXISTS conformance_rows (id text PRIMARY KEY)'),
 *   write: (sql, id) => (sql as pg.PoolClient).query('INSERT INTO conformance_rows VALUES ($1)', [id]).then(() => {}),
 *   rows: async () => (await adminQuery('SELECT id FROM conformance_rows')).rows.map((r) => r.id),
 *   exec: (sql, text) => (sql as pg.PoolClient).query(text),
 * };
 */
export interface SqlProbe {
  /** Prepares what `write` needs (for example, creates a table) in `backend`'s database. */
  setup(backend: Backend): Promise<void>;
  /** Writes a row named `id` through `sql`, the `tx.sql` of an open transaction. */
  write(sql: unknown, id: string): Promise<void>;
  /** The names of the committed rows, in any order. */
  rows(backend: Backend): Promise<string[]>;
  /**
   * Sends the statement `text` as it is through `sql` (the `tx.sql` of an open transaction), the way an
   * application or its ORM would, and resolves or rejects with whatever the handle does. The suite sends
   * transaction control (`BEGIN`, `COMMIT`, `ROLLBACK`, …), which the backend must refuse with a typed
   * error, and savepoint statements (`SAVEPOINT`, `ROLLBACK TO SAVEPOINT`, `RELEASE SAVEPOINT`), which it
   * must let through. Required for backends that declare `sql` (the `transactionControl` group fails
   * without it); optional in the type so that older probes still compile.
   */
  exec?(sql: unknown, text: string): Promise<unknown>;
}

/**
 * What a backend promises, as the suite asks about it: the backend's own {@link BackendCapabilities}, and
 * two properties of its store that only the suite needs declared. Every field defaults to the strong
 * promise; declaring a weaker one makes the suite check the weaker promise instead.
 */
export interface ConformanceCapabilities extends BackendCapabilities {
  /**
   * The store keeps schedules in deadline order (default true): `nextDueAt()` tells the earliest due time
   * and `pageSchedules({ order: 'due' })` pages by due time. A store whose adapter answers in key order only
   * (`order: ['key']`) declares `false`: the suite then checks that `nextDueAt()` says nothing and that
   * pages hold every schedule once, in key order.
   */
  dueOrder?: boolean;
  /**
   * The store has a push channel (default true): once a dispatcher listens, `store.watching` turns true
   * and another process's commit wakes it without a rescan. A store without one declares `false`: the
   * suite then checks that such a commit is delivered by the rescan (`rescanInterval`), and that
   * `watching` stays false.
   */
  pushChannel?: boolean;
}

export type ResolvedCapabilities = Required<ConformanceCapabilities>;

/** Fills in the defaults: every guarantee is promised unless declared otherwise. */
export function resolveCapabilities(declared: ConformanceCapabilities = {}): ResolvedCapabilities {
  return {
    multiProcess: declared.multiProcess ?? true,
    durable: declared.durable ?? true,
    sql: declared.sql ?? false,
    exclusiveClaims: declared.exclusiveClaims ?? false,
    dueOrder: declared.dueOrder ?? true,
    pushChannel: declared.pushChannel ?? true,
  };
}

/** A fresh namespace: lowercase letters and digits, valid as a schema, key prefix, stream token or file name. */
export function freshNamespace(): string {
  return `dt${randomBytes(6).toString('hex')}`;
}

/** Polls `check` until it returns a truthy value or `timeoutMs` passes (then throws with `what`). */
export async function waitFor<T>(
  what: string,
  check: () => T | Promise<T>,
  options: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<NonNullable<T>> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const intervalMs = options.intervalMs ?? 20;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

const workerPath = fileURLToPath(
  new URL(import.meta.url.endsWith('.ts') ? './worker.ts' : './worker.js', import.meta.url),
);

function tsxLoader(): string {
  const require = createRequire(import.meta.url);
  // `--import tsx` registers tsx's loader, so adapter modules written in TypeScript run as they are.
  return pathToFileURL(require.resolve('tsx')).href;
}

/** Owns the backends and processes one test opens, and closes them all afterwards. */
export class Harness {
  readonly target: ConformanceTarget;
  readonly capabilities: ResolvedCapabilities;
  readonly #backends: Backend[] = [];
  readonly #workers: WorkerProcess[] = [];
  readonly #deferred: (() => unknown)[] = [];
  /** Every namespace this test used, for `target.drop`. */
  readonly #namespaces = new Set<string>();

  constructor(target: ConformanceTarget, capabilities: ResolvedCapabilities) {
    this.target = target;
    this.capabilities = capabilities;
  }

  /**
   * What `backend` promises: the capabilities passed to the suite, else those the backend declares (for
   * `sql` and `exclusiveClaims`, which the suite cannot know before opening one).
   */
  promised(backend: Backend): ResolvedCapabilities {
    return resolveCapabilities({ ...backend.capabilities, ...this.target.capabilities });
  }

  /** Opens a backend on `namespace` (a fresh one when omitted). */
  async open(namespace: string = freshNamespace()): Promise<Backend & { namespace: string }> {
    this.#namespaces.add(namespace);
    const backend = await this.target.open(namespace);
    this.#backends.push(backend);
    return Object.assign(backend, { namespace });
  }

  /** Starts `role` from the worker in a child process on `namespace`. */
  spawn(role: string, namespace: string, args: Record<string, unknown> = {}): WorkerProcess {
    if (!this.target.module)
      throw new Error(`conformance target ${this.target.name} has no \`module\` for process tests`);
    this.#namespaces.add(namespace);
    const moduleUrl =
      this.target.module instanceof URL
        ? this.target.module.href
        : this.target.module.startsWith('file:')
          ? this.target.module
          : pathToFileURL(this.target.module).href;
    const child = spawn(
      process.execPath,
      [
        '--import',
        tsxLoader(),
        '--conditions=source',
        workerPath,
        moduleUrl,
        role,
        namespace,
        JSON.stringify(args),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env } },
    );
    const worker = watchChild(child, { label: `worker ${role}` });
    this.#workers.push(worker);
    return worker;
  }

  /** Runs `dispatcher` until this test's cleanup, which drains it before backends close. */
  run<D extends { run(signal: AbortSignal): Promise<void> }>(dispatcher: D): D {
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    this.defer(async () => {
      controller.abort();
      await done;
    });
    return dispatcher;
  }

  /** Runs `fn` at cleanup, before backends close (stopping dispatchers and schedulers, say). */
  defer(fn: () => unknown): void {
    this.#deferred.push(fn);
  }

  /**
   * Kills every worker, runs deferred clean-ups, closes every backend this test opened, then drops the
   * data of every namespace it used (when the target can). Throws when dropping fails.
   */
  async cleanup(): Promise<void> {
    await Promise.allSettled(
      this.#deferred
        .splice(0)
        .reverse()
        .map(async (fn) => fn()),
    );
    await Promise.allSettled(this.#workers.splice(0).map((w) => w.kill()));
    await Promise.allSettled(this.#backends.splice(0).map((b) => b.close()));
    const namespaces = [...this.#namespaces];
    this.#namespaces.clear();
    const drop = this.target.drop;
    if (!drop) return;
    const failed = (await Promise.allSettled(namespaces.map((ns) => drop.call(this.target, ns)))).filter(
      (r): r is PromiseRejectedResult => r.status === 'rejected',
    );
    if (failed.length > 0)
      throw new Error(`${this.target.name}: drop(namespace) failed for ${failed.length} namespace(s)`, {
        cause: failed[0]?.reason,
      });
  }
}
