import { type NatsIo, ROLLUP } from './io.js';
import type { LeaseLayout } from './leases.js';

/**
 * The NATS server's time, as a lower bound: a probe message is published and read back for its server
 * timestamp, which is at most the server's time when the reply arrives; later readings add the time
 * elapsed since on this process's monotonic clock (so a jump of the local wall clock changes nothing).
 * The same timestamp gives an upper bound ({@link latest}): it is at least the server's time when the
 * probe was sent, so adding the time elapsed since the send can only overshoot. The two differ by the
 * probe's round trips; a slow probe (a loaded server, a long fsync) widens the gap, never crosses it.
 * A reading is refreshed every `refreshMs`, which bounds the error a drift between the two clocks' rates
 * could add (parts per million: microseconds). The refresh runs behind the callers: a reading older than
 * `refreshMs` still answers (it stays a lower bound) while a new probe is under way, so no caller waits
 * for the probe's two round trips but the first, and one whose reading is older than `staleMs` (probes
 * failing through an outage) waits for a probe, failing with it.
 *
 * Leases and cursors judge expiry with this clock against the server timestamps of their last writes,
 * so no process's wall clock matters, however skewed.
 */
export class ServerClock {
  readonly #io: NatsIo;
  readonly #layout: Pick<LeaseLayout, 'leaseStream' | 'clock' | 'rollup'>;
  readonly #refreshMs: number;
  readonly #staleMs: number;
  #sample: Sample | undefined;
  #probe: Promise<Sample> | undefined;

  constructor(
    io: NatsIo,
    layout: Pick<LeaseLayout, 'leaseStream' | 'clock' | 'rollup'>,
    refreshMs = 5000,
    staleMs = 12 * refreshMs,
  ) {
    this.#io = io;
    this.#layout = layout;
    this.#refreshMs = refreshMs;
    this.#staleMs = staleMs;
  }

  /** A lower bound of the server's current time, in milliseconds since the epoch. */
  async now(): Promise<number> {
    const sample = await this.#reading();
    return sample.server + (performance.now() - sample.local);
  }

  /**
   * An upper bound of the server's current time, in milliseconds since the epoch: a process whose clock
   * reads later than this runs ahead of the server, however slowly the probe came back.
   */
  async latest(): Promise<number> {
    const sample = await this.#reading();
    return sample.server + (performance.now() - sample.sent);
  }

  /** The last reading, refreshed behind the caller when older than `refreshMs`, awaited when too old. */
  async #reading(): Promise<Sample> {
    const sample = this.#sample;
    const age = sample ? performance.now() - sample.local : Number.POSITIVE_INFINITY;
    if (!sample || age > this.#staleMs) return this.#refresh();
    if (age > this.#refreshMs) this.#refresh().catch(() => {}); // a failure that lasts shows past `staleMs`
    return sample;
  }

  /** The probe under way, or a new one; its reading replaces the last when it lands. */
  #refresh(): Promise<Sample> {
    this.#probe ??= this.#measure()
      .then((sample) => {
        this.#sample = sample;
        return sample;
      })
      .finally(() => {
        this.#probe = undefined;
      });
    return this.#probe;
  }

  async #measure(): Promise<Sample> {
    const sent = performance.now();
    await this.#io.publish(this.#layout.clock, '', this.#layout.rollup ? { headers: ROLLUP } : {});
    // The last probe on the subject is ours or a later one: either was stored before this read returns.
    const m = await this.#io.last(this.#layout.leaseStream, this.#layout.clock);
    const local = performance.now();
    if (!m) throw this.#io.error(new Error('the clock probe vanished'), 'read the server time');
    return { server: m.time, local, sent };
  }
}

/**
 * A probe's reading: the server timestamp of the last probe (ours or a later one), and this process's
 * monotonic times when ours was sent and when the timestamp came back.
 */
interface Sample {
  server: number;
  local: number;
  sent: number;
}
