import { performance } from 'node:perf_hooks';
import {
  type BufferedReads,
  type ConflictError,
  createBufferedDelivery,
  type DeliveryTransaction,
  type Logger,
  type Schedule,
  type StoreOp,
} from '@duetime/core';
import { decodeSchedulePairs } from './codec.js';
import type { Committer } from './commit.js';
import { mapRedisError } from './errors.js';
import type { KeySpace } from './keys.js';
import { runScript, type ScriptRunner } from './scripts.js';

export interface DeliverySettings {
  runner: ScriptRunner;
  keys: KeySpace;
  committer: Committer;
  reads: BufferedReads;
  /** `host:port` for messages. */
  target: string;
  logger: Logger;
  /** Starts claim tokens: unique per backend instance. */
  senderId: string;
  /** Claim time to live in ms, or undefined when claims are off. */
  claimTtl: number | undefined;
  /** Throws once the backend is closed. */
  check(): void;
}

/**
 * Opens deliveries: one `deliver` script call claims a page of due schedules (their due scores move to the
 * claim's expiry and the claims hash names this delivery's token), the dispatcher runs their processors in
 * a buffered delivery, and one `commit` script call applies every group and ends every claim. While a
 * delivery is open, its claims are renewed every third of their time to live; a rollback releases them;
 * a claim whose process died expires and its schedule is due again.
 *
 * With claims off, the page is only read: several processes may deliver one schedule and exactly one
 * commits (the version check); this instance's own open deliveries still never share a schedule.
 */
export class Deliveries {
  readonly #s: DeliverySettings;
  readonly #open = new Set<OpenDelivery>();
  #count = 0;

  constructor(settings: DeliverySettings) {
    this.#s = settings;
  }

  async open(now: Date, limit: number): Promise<DeliveryTransaction<undefined>> {
    this.#s.check();
    const { keys, claimTtl } = this.#s;
    const token = claimTtl === undefined ? '' : `${this.#s.senderId}.${(++this.#count).toString(36)}`;
    // Without claims, nothing hides what this instance's open deliveries hold: read past them.
    const held = claimTtl === undefined ? this.#heldKeys() : undefined;
    const reply = (await runScript(
      this.#s,
      'claim due schedules',
      'deliver',
      [keys.due, keys.schedules, keys.claims],
      [now.getTime(), limit + (held?.size ?? 0), now.getTime() + (claimTtl ?? 0), token],
    )) as unknown[];
    let claimed: Schedule[];
    try {
      claimed = decodeSchedulePairs(reply, keys.schedules);
    } catch (error) {
      // A message that is not duetime's: put the page back (its claims would only expire) and say so.
      const keysClaimed = reply.filter((_, i) => i % 2 === 0).map(String);
      if (token !== '')
        await runScript(
          this.#s,
          'release claims',
          'claim-release',
          [keys.due, keys.schedules, keys.claims],
          [token, ...keysClaimed],
        ).catch(() => {});
      throw error;
    }
    if (held) claimed = claimed.filter((s) => !held.has(s.key)).slice(0, limit);
    const delivery = new OpenDelivery(this.#s, token, claimed, now.getTime(), (d) => this.#open.delete(d));
    if (claimed.length > 0) this.#open.add(delivery);
    return delivery.transaction;
  }

  /** Stops renewing every open delivery's claims without waiting (the backend is closing). */
  close(): void {
    for (const delivery of this.#open) delivery.abandon();
    this.#open.clear();
  }

  #heldKeys(): Set<string> {
    const held = new Set<string>();
    for (const delivery of this.#open) for (const s of delivery.claimed) held.add(s.key);
    return held;
  }
}

/** One open delivery: its claims, their renewal, and the buffered transaction the dispatcher works in. */
class OpenDelivery {
  readonly #s: DeliverySettings;
  readonly #token: string;
  readonly claimed: readonly Schedule[];
  readonly transaction: DeliveryTransaction<undefined>;
  readonly #onEnd: (delivery: OpenDelivery) => void;
  /** The claims' time axis: the caller's `now` at the claim, advanced by real time since. */
  readonly #claimedAt: number;
  readonly #claimedAtReal = performance.now();
  #renewal: NodeJS.Timeout | undefined;
  #ended = false;

  constructor(
    settings: DeliverySettings,
    token: string,
    claimed: readonly Schedule[],
    now: number,
    onEnd: (delivery: OpenDelivery) => void,
  ) {
    this.#s = settings;
    this.#token = token;
    this.claimed = claimed;
    this.#claimedAt = now;
    this.#onEnd = onEnd;
    this.transaction = createBufferedDelivery({
      claimed,
      reads: settings.reads,
      commit: (ops) => settings.committer.transaction(ops),
      commitGroups: (groups) => this.#commit(groups),
      rollback: () => this.#release(),
    });
    if (token !== '' && claimed.length > 0) this.#keepRenewing();
  }

  async #commit(groups: StoreOp[][]): Promise<(ConflictError | undefined)[]> {
    const consumed = new Set<string>();
    for (const ops of groups) for (const op of ops) if (op.op === 'consume') consumed.add(op.key);
    const release = this.claimed.filter((s) => !consumed.has(s.key)).map((s) => s.key);
    // Renewal goes on while the commit retries: a renewal that runs after the commit finds no claim left.
    try {
      return await this.#s.committer.groups({ groups, token: this.#token, release });
    } catch (error) {
      // Applied once or not at all: releasing never undoes a consumption, so the claims end either way.
      await this.#release();
      throw error;
    } finally {
      this.#stopRenewing();
      this.#end();
    }
  }

  /** Puts every schedule this delivery still holds back, due at its stored time (best effort). */
  async #release(): Promise<void> {
    this.#stopRenewing();
    this.#end();
    if (this.#token === '' || this.claimed.length === 0) return;
    const { keys } = this.#s;
    try {
      await this.#s.runner.run(
        'claim-release',
        [keys.due, keys.schedules, keys.claims],
        [this.#token, ...this.claimed.map((s) => s.key)],
      );
    } catch (error) {
      // The claims expire by themselves; the schedules are only held back until then.
      this.#s.logger.debug('could not release delivery claims; they will expire', {
        error: mapRedisError(error, 'release claims', this.#s.target),
      });
    }
  }

  /** Stops renewing without releasing (the backend is closing); the claims expire on their own. */
  abandon(): void {
    this.#stopRenewing();
    this.#end();
  }

  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#onEnd(this);
  }

  #keepRenewing(): void {
    const ttl = this.#s.claimTtl!;
    const every = Math.max(10, Math.floor(ttl / 3));
    const { keys } = this.#s;
    const renew = async () => {
      if (this.#ended) return;
      const expiry = this.#claimedAt + (performance.now() - this.#claimedAtReal) + ttl;
      try {
        await this.#s.runner.run(
          'claim-renew',
          [keys.due, keys.schedules, keys.claims],
          [this.#token, Math.ceil(expiry), ...this.claimed.flatMap((s) => [s.key, s.version])],
        );
      } catch (error) {
        this.#s.logger.debug('could not renew delivery claims', {
          error: mapRedisError(error, 'renew claims', this.#s.target),
        });
      }
      if (!this.#ended) this.#schedule(renew, every);
    };
    this.#schedule(renew, every);
  }

  #schedule(renew: () => Promise<void>, every: number): void {
    this.#renewal = setTimeout(() => void renew(), every);
    this.#renewal.unref();
  }

  #stopRenewing(): void {
    clearTimeout(this.#renewal);
    this.#renewal = undefined;
  }
}
