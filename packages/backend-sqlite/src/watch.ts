import type { Clock, Logger, WatchEvent } from '@duetime/core';

/** What the watcher reads: both are one cheap statement. */
export interface ChangeProbe {
  /** `PRAGMA data_version` on the writer: changes when another connection commits. */
  dataVersion(): number;
  /** The store-wide schedule version counter, as committed: grows with every schedule put. */
  scheduleVersion(): number;
}

/**
 * SQLite has no push channel between processes, so the watcher polls: every `interval` ms of `clock`
 * time, while at least one listener is subscribed, it reads `PRAGMA data_version`, which changes only when
 * another connection (another process, or another instance in this one) commits. Only then does it read
 * the schedule version counter, and it notifies listeners when that grew, i.e. when someone else put a
 * schedule. Commits of this instance are notified by the store itself. No timer runs while nobody listens.
 *
 * The channel is `live` from the first subscription on: polling misses nothing, so a dispatcher may sleep
 * until its next known deadline.
 */
export class ChangeWatcher {
  readonly #probe: ChangeProbe;
  readonly #clock: Clock;
  readonly #interval: number;
  readonly #logger: Logger;
  readonly #listeners = new Set<(event: WatchEvent) => void>();
  #cancel: (() => void) | undefined;
  #dataVersion = -1;
  #scheduleVersion = -1;
  #stopped = false;

  constructor(probe: ChangeProbe, clock: Clock, interval: number, logger: Logger) {
    this.#probe = probe;
    this.#clock = clock;
    this.#interval = interval;
    this.#logger = logger;
  }

  watch(listener: (event: WatchEvent) => void): () => void {
    if (this.#stopped) return () => {};
    const subscription = (event: WatchEvent) => listener(event);
    this.#listeners.add(subscription);
    if (this.#listeners.size === 1) this.#start();
    queueMicrotask(() => {
      if (this.#listeners.has(subscription)) subscription({ type: 'live' });
    });
    return () => {
      this.#listeners.delete(subscription);
      if (this.#listeners.size === 0) this.#pause();
    };
  }

  /** Stops for good (the backend is closing). */
  stop(): void {
    this.#stopped = true;
    this.#listeners.clear();
    this.#pause();
  }

  /** Whether a poll timer is armed (for tests of close()). */
  get polling(): boolean {
    return this.#cancel !== undefined;
  }

  #start(): void {
    try {
      this.#dataVersion = this.#probe.dataVersion();
      this.#scheduleVersion = this.#probe.scheduleVersion();
    } catch (error) {
      this.#logger.debug('sqlite change watcher could not read the database', { error });
    }
    this.#arm();
  }

  #pause(): void {
    this.#cancel?.();
    this.#cancel = undefined;
  }

  #arm(): void {
    this.#cancel = this.#clock.setTimer(this.#interval, () => {
      this.#cancel = undefined;
      if (this.#listeners.size === 0 || this.#stopped) return;
      this.#poll();
      if (this.#listeners.size > 0 && !this.#stopped && this.#cancel === undefined) this.#arm();
    });
  }

  #poll(): void {
    let grew = false;
    try {
      const dataVersion = this.#probe.dataVersion();
      if (dataVersion === this.#dataVersion) return;
      this.#dataVersion = dataVersion;
      const scheduleVersion = this.#probe.scheduleVersion();
      grew = scheduleVersion > this.#scheduleVersion;
      this.#scheduleVersion = Math.max(scheduleVersion, this.#scheduleVersion);
    } catch (error) {
      // A transient failure (the file busy, say) costs one poll; the dispatcher's rescan is the backstop.
      this.#logger.debug('sqlite change watcher could not read the database', { error });
      return;
    }
    if (!grew) return;
    for (const listener of [...this.#listeners]) {
      try {
        listener({ type: 'change' });
      } catch (error) {
        this.#logger.warn('store change listener threw', { error });
      }
    }
  }
}
