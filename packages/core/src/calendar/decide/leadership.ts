import type { Clock } from '../../clock.js';
import { type LeaseLossReason, type LeaseLostError, LeaseManager } from '../../lease/lease-manager.js';
import type { LeaseBackend } from '../../lease/types.js';
import type { Logger } from '../../logger.js';

/**
 * One period of leadership: its fencing token (the lease's token, larger than every earlier epoch's of
 * the group) and a signal aborted when it ends.
 */
export interface Epoch {
  readonly token: number;
  readonly signal: AbortSignal;
}

export interface LeadershipOptions {
  leases: LeaseBackend;
  /** The group's leadership lease key. */
  key: string;
  owner: string;
  ttl: number;
  clock: Clock;
  logger: Logger;
  /** Names the group in logs. */
  group: string;
  /** Called once when an epoch ends without this replica letting go (expired, taken, renewals failed). */
  onLost: (epoch: Epoch) => void;
  /** Hears of every epoch's start and end (lost, or given up with `resigned`). */
  onChange?: (change: LeadershipChange) => void;
}

/** An epoch starting or ending, as {@link LeadershipOptions.onChange} hears of it. */
export type LeadershipChange =
  | { kind: 'acquired'; epoch: Epoch; owner: string }
  | { kind: 'lost'; epoch: Epoch; owner: string; reason: LeaseLossReason | 'resigned' };

/**
 * A replica's leadership of its group: the leadership lease (heartbeat and validity are the
 * {@link LeaseManager}'s) and the {@link Epoch} it leads in. An epoch starts when the lease is taken and
 * ends when it is lost or given up; a new holding is always a new epoch with a larger token.
 */
export class Leadership {
  readonly #lease: LeaseManager;
  readonly #logger: Logger;
  readonly #group: string;
  readonly #onLost: (epoch: Epoch) => void;
  readonly #onChange: ((change: LeadershipChange) => void) | undefined;
  readonly #owner: string;
  #epoch: Epoch | undefined;

  constructor(options: LeadershipOptions) {
    this.#logger = options.logger;
    this.#group = options.group;
    this.#onLost = options.onLost;
    this.#onChange = options.onChange;
    this.#owner = options.owner;
    this.#lease = new LeaseManager({
      leases: options.leases,
      key: options.key,
      owner: options.owner,
      ttl: options.ttl,
      clock: options.clock,
      logger: options.logger,
      onLost: (error) => this.#lost(error),
    });
  }

  /** The epoch this replica leads in, until its loss is noticed (see {@link holds} for validity now). */
  get epoch(): Epoch | undefined {
    return this.#epoch;
  }

  /** Whether this replica leads now: an epoch, and a holding still valid by the local monotonic clock. */
  get leading(): boolean {
    return this.#epoch !== undefined && this.#lease.held;
  }

  /** Whether `epoch` is still this replica's and still valid now. */
  holds(epoch: Epoch): boolean {
    return this.#epoch === epoch && this.#lease.held;
  }

  /**
   * Asks once for the lease. Resolves the new epoch, or `undefined` when another replica leads.
   *
   * @throws whatever the backend throws when it could not be asked (never taken for contention).
   */
  async tryLead(): Promise<Epoch | undefined> {
    if (this.#epoch) return this.#epoch;
    if (!(await this.#lease.acquire())) return undefined;
    const epoch: Epoch = Object.freeze({ token: this.#lease.token as number, signal: this.#lease.signal });
    this.#epoch = epoch;
    this.#logger.info('became leader', { group: this.#group, epoch: epoch.token, owner: this.#lease.owner });
    this.#onChange?.({ kind: 'acquired', epoch, owner: this.#owner });
    return epoch;
  }

  /** Ends the epoch and frees the lease on the backend. */
  async resign(): Promise<void> {
    const epoch = this.#epoch;
    this.#epoch = undefined;
    if (epoch) this.#onChange?.({ kind: 'lost', epoch, owner: this.#owner, reason: 'resigned' });
    await this.#lease.release();
  }

  /** Stops renewing for good (after {@link resign}, or to let the lease expire). */
  close(): void {
    this.#lease.close();
  }

  #lost(error: LeaseLostError): void {
    const epoch = this.#epoch;
    if (!epoch) return;
    this.#logger.warn('lost leadership', { group: this.#group, epoch: epoch.token, reason: error.reason });
    this.#epoch = undefined;
    this.#onChange?.({ kind: 'lost', epoch, owner: this.#owner, reason: error.reason });
    this.#onLost(epoch);
  }
}
