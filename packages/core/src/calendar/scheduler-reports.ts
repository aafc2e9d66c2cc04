import { Emitter } from '../events.js';
import { CalendarTelemetry } from '../telemetry/calendar.js';
import { loadedOpenTelemetry, loadOpenTelemetry, type OpenTelemetryApi } from '../telemetry/otel.js';
import type { Leadership, LeadershipChange } from './decide/leadership.js';
import { type ScheduleRecord, State } from './decide/records.js';
import { SCHEDULER_EVENTS, type SchedulerEvents } from './decide/snapshot.js';
import type { ResolvedConfig } from './declare/config.js';

/**
 * What a scheduler tells about itself: its events (records and leadership changes) and, when set up,
 * OpenTelemetry. Neither ever affects a run.
 */
export class SchedulerReports {
  readonly events: Emitter<SchedulerEvents>;
  telemetry: CalendarTelemetry | undefined;
  readonly #config: ResolvedConfig;
  readonly #leadership: () => Leadership;

  constructor(config: ResolvedConfig, leadership: () => Leadership) {
    this.#config = config;
    this.#leadership = leadership;
    this.events = new Emitter<SchedulerEvents>('scheduler', SCHEDULER_EVENTS, () => config.logger);
  }

  recorded(record: ScheduleRecord): void {
    if (record.state !== State.Running) {
      try {
        this.telemetry?.finished(record);
      } catch (error) {
        this.#config.logger.warn('recording an occurrence in OpenTelemetry failed', { error });
      }
    }
    if (!this.events.has()) return;
    if (record.state === State.Running) this.events.emit('occurrenceAdmitted', { record });
    else this.events.emit('occurrenceFinished', { record });
  }

  leadershipChanged(change: LeadershipChange): void {
    this.telemetry?.leadership(change.kind);
    if (!this.events.has()) return;
    const event = {
      namespace: this.#config.namespace,
      environment: this.#config.environment,
      group: this.#config.group,
      owner: change.owner,
      epoch: change.epoch.token,
    };
    if (change.kind === 'acquired') this.events.emit('leadershipAcquired', event);
    else this.events.emit('leadershipLost', { ...event, reason: change.reason });
  }

  /** Sets up telemetry without delaying the loop (as the Dispatcher does); `stopped` is the loop's state. */
  startTelemetry(stopped: () => boolean): void {
    const option = this.#config.telemetry;
    if (option === false) return;
    const known = option?.api ?? loadedOpenTelemetry();
    if (known !== undefined) this.#attachTelemetry(known, stopped);
    else void loadOpenTelemetry().then((api) => this.#attachTelemetry(api, stopped));
  }

  #attachTelemetry(api: OpenTelemetryApi | null, stopped: () => boolean): void {
    const option = this.#config.telemetry;
    if (!api || option === false || this.telemetry || stopped()) return;
    const c = this.#config;
    try {
      this.telemetry = new CalendarTelemetry(api, option ?? {}, {
        namespace: c.namespace,
        environment: c.environment,
        group: c.group,
        leading: () => this.#leadership().leading,
        epoch: () => this.#leadership().epoch?.token,
      });
    } catch (error) {
      c.logger.warn('OpenTelemetry instruments could not be created; running without them', { error });
    }
  }
}
