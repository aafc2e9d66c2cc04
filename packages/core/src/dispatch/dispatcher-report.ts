import type { Emitter } from '../events.js';
import type { Logger } from '../logger.js';
import type { DeliveryTelemetry } from '../telemetry/delivery.js';
import type { ObservedPart } from './batch.js';
import type { DispatcherEvents, RetryError } from './types.js';

/**
 * Tells of each part's fate once its batch committed or rolled back: to telemetry, then as events.
 * Never throws.
 */
export function reportParts(
  parts: readonly ObservedPart[],
  telemetry: DeliveryTelemetry | undefined,
  events: Emitter<DispatcherEvents>,
  logger: Logger,
): void {
  for (const part of parts) {
    try {
      telemetry?.settle(part);
    } catch (error) {
      logger.warn('recording a delivery in OpenTelemetry failed', { error });
    }
    if (!events.has()) continue;
    const { schedule, attempt, occurrence, latenessMs, durationMs, error } = part;
    const retryAt = part.retryAt as Date;
    switch (part.fate) {
      case 'delivered':
        events.emit('delivered', { schedule, attempt, occurrence, latenessMs, durationMs });
        break;
      case 'failed':
        events.emit('failed', {
          schedule,
          attempt,
          occurrence,
          latenessMs,
          durationMs,
          error,
          retryAt,
        });
        break;
      case 'retried':
        events.emit('retried', {
          schedule,
          attempt,
          occurrence,
          latenessMs,
          durationMs,
          error: error as RetryError,
          retryAt,
        });
        break;
      case 'deadLettered':
        events.emit('deadLettered', {
          schedule,
          attempt,
          occurrence,
          latenessMs,
          durationMs,
          error,
          attempts: attempt,
        });
        break;
      case 'skipped':
        events.emit('skipped', {
          schedule,
          attempt,
          occurrence,
          latenessMs,
          durationMs,
          reason: 'stale',
        });
        break;
      case 'missed': {
        const missed = part.missed ?? {
          count: 1,
          first: schedule.at,
          last: schedule.at,
          reason: 'catch-up',
        };
        events.emit('missed', { schedule, attempt, occurrence, latenessMs, durationMs, ...missed });
        break;
      }
      default:
      // A conflict (delivered again) or a rolled-back batch: nothing happened to report.
    }
  }
}
