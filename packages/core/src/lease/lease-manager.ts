import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { type Clock, systemClock } from '../clock.js';
import { ClosedError, DuetimeError, InvalidArgumentError } from '../errors.js';
import { defaultLogger, type Logger } from '../logger.js';
import { duration, identifier } from '../validate.js';
import { type MonotonicTime, monotonicTime } from './monotonic.js';
import type { LeaseBackend } from './types.js';

/** Why a holding ended. */
export type LeaseLossReason =
  /** The local validity ran out before a renewal was confirmed (the backend was slow or failing). */
  | 'expired'
  /** The backend refused a renewal: the lease expired there or someone else holds it now. */
  | 'taken'
  /** The holder released it. */
  | 'released'
  /** The manager was closed without releasing (the lease expires on the backend by itself). */
  | 'closed';

/**
 * The signal of a holding is aborted with this error when the holding ends. `code` is
 * `DUETIME_LEADERSHIP_LOST` whatever the lease guards (leadership of a group, an overlap lock).
 */
export class LeaseLostError extends DuetimeError {
  readonly key: string;
  readonly reason: LeaseLossReason;

  constructor(key: string, reason: LeaseLossReason, options: { cause?: unknown } = {}) {
    super('DUETIME_LEADERSHIP_LOST', `lease ${JSON.stringify(key)} lost (${reason})`, options);
    this.key = key;
    this.reason = reason;
  }
}

export interface LeaseManagerOptions {
  /** The backend's leases. */
  leases: LeaseBackend;
  /** What the lease guards, e.g. `duetime/calendar/default/leader`. */
  key: string;
  /** Time to live asked of the backend on every acquire and renewal, in ms. */
  ttl: number;
  /** Who holds it; unique per manager by default (`host:pid:random`). */
  owner?: string;
  /** Time source for timers and, through {@link monotonicTime}, for validity (default: the system clock). */
  clock?: Clock;
  /** Renewal period in ms (default `ttl / 3`): two renewals can fail before the lease is at risk. */
  renewInterval?: number;
  /**
   * Safety margin in ms (default `ttl / 10`): the holding is valid until `sent + ttl - margin`, where
   * `sent` is when the granting request was sent, on the local monotonic clock. It absorbs clock-rate
   * differences between this process and the backend and the delay between checking and acting.
   */
  margin?: number;
  logger?: Logger;
  /** Called once per lost holding (not when it is released or closed). */
  onLost?: (error: LeaseLostError) => void;
}

interface Holding {
  token: number;
  /** Monotonic instant until which the holding is valid locally. */
  validUntil: number;
  controller: AbortController;
  ended: boolean;
  cancelRenew?: () => void;
  cancelExpiry?: () => void;
}

/** A fresh, unique owner id: host, process and 48 random bits. */
export function uniqueOwner(prefix = ''): string {
  return `${prefix}${hostname()}:${process.pid}:${randomBytes(6).toString('hex')}`;
}

/**
 * Holds one lease and keeps it: acquires it, renews it every `ttl / 3`, and ends the holding (aborting
 * its {@link LeaseManager.signal}) the moment it can no longer be sure of it.
 *
 * Validity is measured locally and conservatively: from when each granting request was **sent**, on a
 * monotonic clock, minus `margin`. The backend's reply time is never trusted, so a slow reply can only
 * shorten the holding, never lengthen it. Once a holding has ended, a late successful reply does not
 * restore it (a new `acquire()` starts a new holding). A backend error is never taken for contention: it
 * is logged and retried while the holding is still valid, and the holding ends only when validity runs
 * out. A refusal (`renew` → `undefined`) ends it at once.
 */
export class LeaseManager {
  readonly key: string;
  readonly owner: string;
  readonly ttl: number;
  readonly #leases: LeaseBackend;
  readonly #clock: Clock;
  readonly #monotonic: MonotonicTime;
  readonly #renewInterval: number;
  readonly #margin: number;
  readonly #logger: Logger;
  readonly #listeners = new Set<(error: LeaseLostError) => void>();
  #holding: Holding | undefined;
  #closed = false;
  /** Acquisitions on their way: a late reply must not free a token one of them is about to hold. */
  #acquiring = 0;
  /** Releases on their way: an acquisition waits for them, so that the backend sees both in order. */
  readonly #releasing = new Set<Promise<unknown>>();

  constructor(options: LeaseManagerOptions) {
    if (typeof options !== 'object' || options === null)
      throw new InvalidArgumentError('options', options, 'must be an object { leases, key, ttl }');
    if (typeof options.leases?.acquire !== 'function' || typeof options.leases?.renew !== 'function')
      throw new InvalidArgumentError(
        'options.leases',
        options.leases,
        'must be a LeaseBackend (backend.leases)',
      );
    this.#leases = options.leases;
    this.key = identifier('options.key', options.key);
    this.ttl = duration('options.ttl', options.ttl);
    this.owner = options.owner === undefined ? uniqueOwner() : identifier('options.owner', options.owner);
    this.#clock = options.clock ?? systemClock;
    this.#monotonic = monotonicTime(this.#clock);
    this.#renewInterval = duration('options.renewInterval', options.renewInterval ?? this.ttl / 3);
    this.#margin = duration('options.margin', options.margin ?? this.ttl / 10, { allowZero: true });
    if (this.#margin >= this.ttl)
      throw new InvalidArgumentError(
        'options.margin',
        this.#margin,
        `must be less than options.ttl (${this.ttl})`,
      );
    if (this.#renewInterval >= this.ttl - this.#margin)
      throw new InvalidArgumentError(
        'options.renewInterval',
        this.#renewInterval,
        `must be less than options.ttl - options.margin (${this.ttl - this.#margin}) to renew in time`,
      );
    this.#logger = options.logger ?? defaultLogger;
    if (options.onLost !== undefined) {
      if (typeof options.onLost !== 'function')
        throw new InvalidArgumentError('options.onLost', options.onLost, 'must be a function');
      this.#listeners.add(options.onLost);
    }
  }

  /** Whether the lease is held and still valid by the local monotonic clock. */
  get held(): boolean {
    const holding = this.#holding;
    if (!holding) return false;
    if (this.#monotonic() >= holding.validUntil) {
      this.#end(holding, 'expired');
      return false;
    }
    return true;
  }

  /** The fencing token of the current holding. */
  get token(): number | undefined {
    return this.held ? this.#holding?.token : undefined;
  }

  /** Aborted when the current holding ends (an already aborted signal when nothing is held). */
  get signal(): AbortSignal {
    if (this.held && this.#holding) return this.#holding.controller.signal;
    return AbortSignal.abort(new LeaseLostError(this.key, 'expired'));
  }

  /** Milliseconds of local validity left (0 when not held). */
  remaining(): number {
    if (!this.held || !this.#holding) return 0;
    return Math.max(0, this.#holding.validUntil - this.#monotonic());
  }

  /** Listens to lost holdings; returns a function that stops listening. */
  onLost(listener: (error: LeaseLostError) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Tries once to take the lease (or confirms it when already held). Resolves `true` when held, `false`
   * when someone else holds it.
   *
   * @throws {BackendError} (or whatever the backend throws) when the backend could not be asked: an error
   *   is never reported as contention.
   */
  async acquire(): Promise<boolean> {
    if (this.#closed) throw new ClosedError(`lease manager for ${JSON.stringify(this.key)}`);
    if (this.held) return true;
    this.#acquiring++;
    try {
      return await this.#acquire();
    } finally {
      this.#acquiring--;
    }
  }

  async #acquire(): Promise<boolean> {
    // A release sent earlier (a late renewal's, say) must land first: the backend keeps the token when
    // the same owner acquires a live lease, so a release landing after this acquisition would free the
    // lease of the holding it creates.
    while (this.#releasing.size > 0) await Promise.allSettled([...this.#releasing]);
    if (this.held) return true;
    const sent = this.#monotonic();
    const grant = await this.#leases.acquire(this.key, this.owner, this.ttl);
    if (!grant) return false;
    if (this.#closed) {
      await this.#freeStale(grant.token, true);
      return false;
    }
    if (this.held) return true; // a concurrent acquire() won the race in this process
    const validUntil = sent + this.ttl - this.#margin;
    if (this.#monotonic() >= validUntil) {
      // The reply came too late to be of use: the grant may already have expired on the backend.
      this.#logger.warn('lease granted too late to use; releasing it', { key: this.key });
      await this.#freeStale(grant.token, true);
      return false;
    }
    const holding: Holding = {
      token: grant.token,
      validUntil,
      controller: new AbortController(),
      ended: false,
    };
    this.#holding = holding;
    this.#armExpiry(holding);
    this.#scheduleRenew(holding, this.#renewInterval);
    return true;
  }

  /**
   * Ends the holding and frees the lease on the backend. Resolves whether the backend released it
   * (`false` when it had already expired or been taken).
   */
  async release(): Promise<boolean> {
    const holding = this.#holding;
    if (!holding) return false;
    this.#end(holding, 'released');
    const releasing = this.#leases.release(this.key, this.owner, holding.token);
    this.#track(releasing);
    return releasing;
  }

  /** Stops renewing without releasing: the lease expires on the backend by itself. */
  close(): void {
    this.#closed = true;
    if (this.#holding) this.#end(this.#holding, 'closed');
  }

  #scheduleRenew(holding: Holding, ms: number): void {
    holding.cancelRenew = this.#clock.setTimer(ms, () => void this.#renew(holding));
  }

  #armExpiry(holding: Holding): void {
    holding.cancelExpiry?.();
    const left = holding.validUntil - this.#monotonic();
    holding.cancelExpiry = this.#clock.setTimer(Math.max(0, left), () => {
      if (holding.ended) return;
      if (this.#monotonic() >= holding.validUntil) this.#end(holding, 'expired');
      else this.#armExpiry(holding);
    });
  }

  async #renew(holding: Holding): Promise<void> {
    if (holding.ended) return;
    const sent = this.#monotonic();
    let grant: { token: number } | undefined;
    try {
      grant = await this.#leases.renew(this.key, this.owner, holding.token, this.ttl);
    } catch (error) {
      if (holding.ended) return;
      const left = holding.validUntil - this.#monotonic();
      const retryIn = Math.max(1, Math.min(this.#renewInterval, left / 3));
      this.#logger.warn('lease renewal failed; retrying while still valid', {
        key: this.key,
        error,
        validForMs: Math.max(0, left),
        retryInMs: retryIn,
      });
      this.#scheduleRenew(holding, retryIn);
      return;
    }
    if (holding.ended) {
      // A late reply never restores a holding that already ended; free what the backend just extended,
      // unless a newer holding in this process owns, or is about to own, the same token.
      if (grant) await this.#freeStale(grant.token, false);
      return;
    }
    if (!grant) {
      this.#end(holding, 'taken');
      return;
    }
    if (this.#monotonic() >= holding.validUntil) {
      this.#end(holding, 'expired');
      await this.#freeStale(grant.token, false);
      return;
    }
    holding.validUntil = Math.max(holding.validUntil, sent + this.ttl - this.#margin);
    this.#armExpiry(holding);
    this.#scheduleRenew(holding, this.#renewInterval);
  }

  #end(holding: Holding, reason: LeaseLossReason): void {
    if (holding.ended) return;
    holding.ended = true;
    holding.cancelRenew?.();
    holding.cancelExpiry?.();
    if (this.#holding === holding) this.#holding = undefined;
    const error = new LeaseLostError(this.key, reason);
    holding.controller.abort(error);
    if (reason === 'released' || reason === 'closed') return;
    this.#logger.warn('lease lost', { key: this.key, reason, token: holding.token });
    for (const listener of [...this.#listeners]) {
      try {
        listener(error);
      } catch (listenerError) {
        this.#logger.error('lease loss listener threw', { key: this.key, error: listenerError });
      }
    }
  }

  /**
   * Frees a grant this process cannot use, unless a holding of this process has the same token or an
   * acquisition (other than the caller's own, `fromAcquire`) is on its way and may get it: then the lease
   * stays, and at worst expires by itself.
   */
  async #freeStale(token: number, fromAcquire: boolean): Promise<void> {
    const otherAcquisitions = this.#acquiring - (fromAcquire ? 1 : 0);
    if (this.#holding?.token === token || otherAcquisitions > 0) return;
    await this.#releaseQuietly(token);
  }

  async #releaseQuietly(token: number): Promise<void> {
    const releasing = this.#leases.release(this.key, this.owner, token);
    this.#track(releasing);
    try {
      await releasing;
    } catch (error) {
      this.#logger.warn('could not release a lease; it will expire by itself', { key: this.key, error });
    }
  }

  #track(releasing: Promise<unknown>): void {
    const settled = releasing.then(
      () => undefined,
      () => undefined,
    );
    this.#releasing.add(settled);
    void settled.then(() => this.#releasing.delete(settled));
  }
}
