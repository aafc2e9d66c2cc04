import type { Logger, Store } from '@duetime/core';
import type { DashboardDispatcher } from './handler.js';

/** One point of the lateness chart. */
export interface LatenessSample {
  /** When it was taken (ISO 8601). */
  at: string;
  /** Schedules due then (counted up to the dashboard's `countLimit`). */
  due: number;
  /** How long the oldest due schedule had been waiting (now − its `dueAt`), in ms; 0 with none due. */
  oldestDueMs: number;
  /**
   * Deliveries by the in-process dispatchers since the previous sample, and the largest and mean
   * lateness among them (ms). Absent without mounted dispatchers.
   */
  delivered?: number;
  maxLatenessMs?: number;
  meanLatenessMs?: number;
}

export interface SamplerOptions {
  intervalMs: number;
  windowMs: number;
  countLimit: number;
  dispatchers: DashboardDispatcher[];
  logger: Logger;
}

/**
 * Samples the due backlog every `intervalMs` (what any reader of the store can see: how many schedules are
 * due and how long the oldest has waited), plus the lateness of deliveries made by dispatchers mounted in
 * this process. Starts with the first API request, keeps `windowMs` of samples, and never keeps the
 * process alive (its timer is unref'd).
 */
export class LatenessSampler {
  readonly intervalMs: number;
  readonly #store: Store;
  readonly #options: SamplerOptions;
  readonly #samples: LatenessSample[] = [];
  #timer: NodeJS.Timeout | undefined;
  #unsubscribe: (() => void)[] = [];
  #delivered = 0;
  #sum = 0;
  #max = 0;
  #sampling = false;

  constructor(store: Store, options: SamplerOptions) {
    this.#store = store;
    this.#options = options;
    this.intervalMs = options.intervalMs;
  }

  start(): void {
    if (this.#timer) return;
    for (const dispatcher of this.#options.dispatchers)
      this.#unsubscribe.push(
        dispatcher.on('delivered', (event) => {
          this.#delivered++;
          this.#sum += event.latenessMs;
          if (event.latenessMs > this.#max) this.#max = event.latenessMs;
        }),
      );
    this.#timer = setInterval(() => void this.sample(), this.intervalMs);
    this.#timer.unref();
    void this.sample();
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    for (const off of this.#unsubscribe) off();
    this.#unsubscribe = [];
  }

  samples(): LatenessSample[] {
    return this.#samples.map((s) => ({ ...s }));
  }

  /** Takes one sample now (the timer calls it; tests may too). */
  async sample(): Promise<void> {
    if (this.#sampling) return;
    this.#sampling = true;
    try {
      const now = this.#store.clock.now();
      // Never a message: a count and the earliest due instant (on NATS, from the timers that fired).
      const backlog = await this.#store.dueBacklog({ limit: this.#options.countLimit });
      const due = backlog.count;
      const oldest = backlog.oldest?.getTime();
      const sample: LatenessSample = {
        at: new Date(now).toISOString(),
        due,
        oldestDueMs: oldest === undefined ? 0 : Math.max(0, now - oldest),
      };
      if (this.#options.dispatchers.length > 0) {
        sample.delivered = this.#delivered;
        sample.maxLatenessMs = this.#max;
        sample.meanLatenessMs = this.#delivered > 0 ? Math.round(this.#sum / this.#delivered) : 0;
        this.#delivered = 0;
        this.#sum = 0;
        this.#max = 0;
      }
      this.#samples.push(sample);
      const keep = Math.max(2, Math.ceil(this.#options.windowMs / this.intervalMs));
      if (this.#samples.length > keep) this.#samples.splice(0, this.#samples.length - keep);
    } catch (error) {
      this.#options.logger.warn('dashboard: sampling the due backlog failed', {
        error: error instanceof Error ? error.name : 'error',
      });
    } finally {
      this.#sampling = false;
    }
  }
}
