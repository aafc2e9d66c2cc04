import { performance } from 'node:perf_hooks';

/**
 * Serialises the transactions of one database file inside this process.
 *
 * better-sqlite3 is synchronous: if a second connection in this process ran `BEGIN IMMEDIATE` while the
 * first one waits on an `await` inside its transaction, the second would block the whole event loop, and
 * with it the first transaction's progress, until the busy timeout. So every backend instance opened on the
 * same file (keyed by its real path) shares one gate, held from `BEGIN` to `COMMIT`/`ROLLBACK`, and one
 * instance's concurrent transactions queue on it too. Other processes are kept out by SQLite's own lock.
 */
export class TransactionGate {
  #held = false;
  readonly #queue: (() => void)[] = [];
  /** When the current run of back-to-back holds began. */
  #streakStart = 0;
  #freeSince = Number.NEGATIVE_INFINITY;

  /** Waits for the gate; resolves with its release function (idempotent). */
  async acquire(): Promise<() => void> {
    if (this.#held) await new Promise<void>((resolve) => this.#queue.push(resolve));
    else {
      this.#held = true;
      if (performance.now() - this.#freeSince >= BREATHER_MS) this.#streakStart = performance.now();
    }
    // Fairness towards other processes: they poll for SQLite's write lock (see connection.ts), and would
    // never find it free if this process handed the gate over back to back for ever.
    if (performance.now() - this.#streakStart >= STREAK_MS) {
      await realSleep(BREATHER_MS);
      this.#streakStart = performance.now();
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#queue.shift();
      if (next) next();
      else {
        this.#held = false;
        this.#freeSince = performance.now();
      }
    };
  }

  /** Transactions waiting for the gate (not counting the holder). */
  get waiting(): number {
    return this.#queue.length;
  }
}

/** After this long of back-to-back transactions, the gate pauses briefly before the next one. */
const STREAK_MS = 200;
/** The pause, long enough for another process's lock poll (at most a few ms apart) to get in. */
const BREATHER_MS = 4;

/** Sleeps in real time: the injected clock may be a ManualClock that never moves on its own. */
export function realSleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

interface Entry {
  gate: TransactionGate;
  refs: number;
}

// On globalThis, so that two copies of this module loaded in one process still share gates.
const REGISTRY = Symbol.for('duetime.backend-sqlite.gates');
const shared = globalThis as { [REGISTRY]?: Map<unknown, Entry> };
shared[REGISTRY] ??= new Map<unknown, Entry>();
const registry: Map<unknown, Entry> = shared[REGISTRY];

/**
 * The gate of a database: `key` is the file's real path, or the connection object itself for an in-memory
 * database (which no other connection can see). Call the returned `unref` once when done with it.
 */
export function gateFor(key: unknown): { gate: TransactionGate; unref: () => void } {
  let entry = registry.get(key);
  if (!entry) {
    entry = { gate: new TransactionGate(), refs: 0 };
    registry.set(key, entry);
  }
  entry.refs++;
  const held = entry;
  let done = false;
  return {
    gate: held.gate,
    unref: () => {
      if (done) return;
      done = true;
      held.refs--;
      if (held.refs === 0 && registry.get(key) === held) registry.delete(key);
    },
  };
}
