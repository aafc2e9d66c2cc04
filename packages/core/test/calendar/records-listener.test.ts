import { describe, expect, it } from 'vitest';
import {
  createMemoryBackend,
  every,
  InvalidArgumentError,
  ManualClock,
  Registry,
  type ScheduleRecord,
  Scheduler,
} from '../../src/index.js';

describe('Scheduler onRecord', () => {
  it('hears of each record when it starts and when it finishes, and a throwing listener changes nothing', async () => {
    const clock = new ManualClock(Date.UTC(2026, 2, 2, 10, 0, 0));
    const backend = createMemoryBackend({ clock });
    const heard: Pick<ScheduleRecord, 'schedule' | 'state'>[] = [];
    const scheduler = new Scheduler({
      registry: new Registry(every('tick', 60_000, () => {})),
      backend,
      clock,
      onRecord: (record) => {
        heard.push({ schedule: record.schedule, state: record.state });
        throw new Error('listener bug');
      },
    });
    const done = scheduler.run();
    await clock.advance(61_000);
    await scheduler.stop();
    await done;
    expect(heard.slice(0, 2)).toEqual([
      { schedule: 'tick', state: 'running' },
      { schedule: 'tick', state: 'succeeded' },
    ]);
    expect(scheduler.snapshot().counts.succeeded).toBeGreaterThanOrEqual(1);
  });

  it('rejects a listener that is not a function', () => {
    const backend = createMemoryBackend();
    expect(() => new Scheduler({ registry: new Registry(), backend, onRecord: 'log' as never })).toThrow(
      InvalidArgumentError,
    );
  });
});
