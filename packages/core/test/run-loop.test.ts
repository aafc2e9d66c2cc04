import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/index.js';
import { RunLoop } from '../src/run-loop.js';

/** A loop that is running (its body waits for the test), and the sleeps' outcomes with their end times. */
function running(clock: ManualClock) {
  const loop = new RunLoop('test loop', clock);
  let release!: () => void;
  const body = new Promise<void>((resolve) => {
    release = resolve;
  });
  void loop.start(
    () => body,
    undefined,
    () => release(),
  );
  const slept: [boolean, number][] = [];
  const sleep = (ms: number) => loop.sleep(ms).then((elapsed) => void slept.push([elapsed, clock.now()]));
  return { loop, slept, sleep, stop: () => release() };
}

describe('RunLoop.lookBy', () => {
  it('bounds the next sleep when called while the loop is awake', async () => {
    const clock = new ManualClock(0);
    const { loop, slept, sleep, stop } = running(clock);
    loop.lookBy(300);
    loop.lookBy(500);
    void sleep(1000);
    await clock.advance(299);
    expect(slept).toEqual([]);
    await clock.advance(1);
    expect(slept).toEqual([[true, 300]]);
    // Used once: the sleep after it is the caller's own.
    void sleep(1000);
    await clock.advance(999);
    expect(slept).toHaveLength(1);
    await clock.advance(1);
    expect(slept).toEqual([
      [true, 300],
      [true, 1300],
    ]);
    stop();
  });

  it('moves the end of the current sleep earlier, never later', async () => {
    const clock = new ManualClock(0);
    const { loop, slept, sleep, stop } = running(clock);
    void sleep(1000);
    await clock.advance(100);
    loop.lookBy(2000);
    loop.lookBy(400);
    expect(loop.armedAt).toBe(400);
    await clock.advance(299);
    expect(slept).toEqual([]);
    await clock.advance(1);
    expect(slept).toEqual([[true, 400]]);
    stop();
  });

  it('wakes the loop at once for an instant that has come', async () => {
    const clock = new ManualClock(1000);
    const { loop, slept, sleep, stop } = running(clock);
    void sleep(5000);
    await clock.advance(0);
    loop.lookBy(1000);
    await clock.advance(0);
    expect(slept).toEqual([[false, 1000]]);
    // Awake: the next sleep returns at once.
    loop.lookBy(900);
    void sleep(5000);
    await clock.advance(0);
    expect(slept).toEqual([
      [false, 1000],
      [false, 1000],
    ]);
    stop();
  });
});
