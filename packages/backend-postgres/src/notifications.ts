import { createHash, randomBytes } from 'node:crypto';
import { type Clock, type Logger, sleep, systemClock, type WatchEvent } from '@duetime/core';
import type pg from 'pg';
import { quoteIdent } from './sql/ident.js';

/**
 * Least time between two announcements of one backend instance, in ms. Commits made meanwhile are merged
 * into the next announcement (the earliest deadline wins); the first one after a quiet moment goes at once.
 */
export const ANNOUNCE_SPACING_MS = 2;

/**
 * The announcement, one statement ($1 channel, $2 payload): its own transaction, committed without waiting
 * for the WAL flush (`set_config(…, true)` lasts until that commit), since a lost announcement only delays
 * a wake-up until the rescan.
 */
export const NOTIFY = "SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)";

/** Longest channel name PostgreSQL accepts (NAMEDATALEN - 1 bytes). */
const MAX_CHANNEL_BYTES = 63;

/** The NOTIFY channel of a schema: `duetime:<schema>`, hashed when that would be too long. */
export function channelFor(schema: string): string {
  const plain = `duetime:${schema}`;
  if (Buffer.byteLength(plain) <= MAX_CHANNEL_BYTES) return plain;
  return `duetime:${createHash('sha256').update(schema).digest('hex').slice(0, 40)}`;
}

/**
 * Cross-process wake-up over LISTEN/NOTIFY.
 *
 * Sending: after a transaction that put schedules commits, {@link ChangeNotifier.announce} sends
 * `pg_notify(<channel>, '<instance>:<earliest ms>')` in a statement of its own ({@link NOTIFY}), with
 * `synchronous_commit` off, at most one at a time per backend instance (announcements made meanwhile
 * are merged into the next one, keeping the earliest deadline), and at least
 * {@link ANNOUNCE_SPACING_MS} apart, so a stream of commits costs a few announcements, not one each.
 * Not inside the committing transaction: PostgreSQL holds a database-wide lock from a notifying transaction's pre-commit until its commit is
 * flushed, which serialises every notifying commit and defeats group commit (16 concurrent writers:
 * about 200 commits/s with the NOTIFY inside, about 650 without, on the development machine). It still
 * fires only for commits; a crash between a commit and its announcement leaves it to the rescan.
 *
 * Listening: one dedicated connection per backend instance LISTENs, opened only while somebody watches.
 * Each time it starts listening (first time, and after reconnecting with backoff when the connection
 * drops) it reports `live` (commits made before were not heard: core looks at the store again); a lost
 * connection is reported `lost`; other instances' announcements are reported as `change`.
 */
export class ChangeNotifier {
  /** Identifies this instance's own notifications, which core already reports as local changes. */
  readonly instanceId = randomBytes(6).toString('hex');
  readonly channel: string;
  readonly #createClient: () => pg.Client;
  readonly #send: (channel: string, payload: string) => Promise<unknown>;
  readonly #logger: Logger;
  readonly #clock: Clock;
  /** Core's listener (core subscribes once per store, however many listen). */
  #listener: ((event: WatchEvent) => void) | undefined;
  #run: { abort: AbortController; done: Promise<void> } | undefined;
  readonly #stopping = new Set<Promise<void>>();
  /** The earliest deadline among commits not announced yet; `null` when there is nothing to announce. */
  #pending: number | null = null;
  #sending: Promise<void> | undefined;
  /** When the last announcement went out (performance.now()). */
  #lastSent = Number.NEGATIVE_INFINITY;

  constructor(options: {
    schema: string;
    createClient: () => pg.Client;
    /** Sends one notification (see {@link NOTIFY}). */
    send: (channel: string, payload: string) => Promise<unknown>;
    logger: Logger;
    /** Times the reconnection backoff (default: the system clock). */
    clock?: Clock;
  }) {
    this.#clock = options.clock ?? systemClock;
    this.channel = channelFor(options.schema);
    this.#createClient = options.createClient;
    this.#send = options.send;
    this.#logger = options.logger;
  }

  /** Tells other instances that a commit put schedules, the earliest due at `earliest`. Never throws. */
  announce(earliest: number): void {
    this.#pending = this.#pending === null ? earliest : Math.min(this.#pending, earliest);
    this.#sending ??= this.#drain().finally(() => {
      this.#sending = undefined;
    });
  }

  async #drain(): Promise<void> {
    while (this.#pending !== null) {
      // Real time, not the backend's clock: this spaces network messages, it schedules nothing.
      const wait = this.#lastSent + ANNOUNCE_SPACING_MS - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      this.#lastSent = performance.now();
      const payload = `${this.instanceId}:${this.#pending}`;
      this.#pending = null;
      try {
        await this.#send(this.channel, payload);
      } catch (error) {
        // A hint only: listeners rescan on their own schedule and after reconnecting.
        this.#logger.debug('could not announce a schedule change', { error });
      }
    }
  }

  /** Reports other instances' commits and the channel's state to `listener`; returns how to stop. */
  watch(listener: (event: WatchEvent) => void): () => void {
    this.#stop();
    this.#listener = listener;
    const abort = new AbortController();
    const run = { abort, done: this.#listen(abort.signal) };
    this.#run = run;
    return () => {
      if (this.#run === run) this.#stop();
    };
  }

  /** Stops listening and waits until the connection is closed. */
  async close(): Promise<void> {
    this.#stop();
    await Promise.all([...this.#stopping, this.#sending]);
  }

  #stop(): void {
    const run = this.#run;
    this.#listener = undefined;
    if (!run) return;
    this.#run = undefined;
    run.abort.abort();
    this.#stopping.add(run.done);
    void run.done.finally(() => this.#stopping.delete(run.done));
  }

  #emit(event: WatchEvent): void {
    this.#listener?.(event);
  }

  #onNotification(message: pg.Notification): void {
    if (message.channel !== this.channel) return;
    const [instance, earliest] = (message.payload ?? '').split(':');
    if (instance === this.instanceId) return;
    const ms = earliest ? Number(earliest) : Number.NaN;
    this.#emit(Number.isFinite(ms) ? { type: 'change', earliest: new Date(ms) } : { type: 'change' });
  }

  async #listen(signal: AbortSignal): Promise<void> {
    let failures = 0;
    let missedSome = false;
    let live = false;
    const aborted = new Promise<void>((resolve) =>
      signal.addEventListener('abort', () => resolve(), { once: true }),
    );
    while (!signal.aborted) {
      const client = this.#createClient();
      const lost = new Promise<unknown>((resolve) => {
        client.on('error', resolve);
        client.on('end', () => resolve(new Error('the LISTEN connection ended')));
      });
      client.on('notification', (message) => this.#onNotification(message));
      try {
        await client.connect();
        await client.query(`LISTEN ${quoteIdent(this.channel)}`);
        if (signal.aborted) break;
        // Commits between the watcher's last look and this LISTEN were not heard: core looks again at `live`.
        if (missedSome) this.#logger.info('listening for schedule changes again', { channel: this.channel });
        live = true;
        this.#emit({ type: 'live' });
        failures = 0;
        const reason = await Promise.race([lost, aborted]);
        if (signal.aborted) break;
        missedSome = true;
        this.#logger.warn('lost the LISTEN connection; reconnecting', {
          channel: this.channel,
          error: reason,
        });
      } catch (error) {
        failures++;
        missedSome = true;
        this.#logger.warn('could not LISTEN for schedule changes; retrying', {
          channel: this.channel,
          failures,
          error,
        });
      } finally {
        if (live && !signal.aborted) this.#emit({ type: 'lost' });
        live = false;
        await client.end().catch(() => {});
      }
      // Backoff with jitter: 100 ms after a drop, doubling per failed attempt, at most 5 s.
      const base = Math.min(5_000, 100 * 2 ** failures);
      await sleep(this.#clock, base / 2 + Math.random() * (base / 2), signal);
    }
  }
}
