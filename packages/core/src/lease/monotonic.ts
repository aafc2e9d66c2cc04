import { performance } from 'node:perf_hooks';
import { type Clock, systemClock } from '../clock.js';

/**
 * A reading of elapsed time that never runs backwards, in milliseconds from an arbitrary origin.
 * Lease validity is measured on it: a wall clock that an operator or NTP moves must never make a lease
 * look valid for longer than it is.
 */
export type MonotonicTime = () => number;

/** A clock that also offers elapsed time of its own (`performance.now()`-like). */
export interface MonotonicClock extends Clock {
  monotonic(): number;
}

function hasMonotonic(clock: Clock): clock is MonotonicClock {
  return typeof (clock as Partial<MonotonicClock>).monotonic === 'function';
}

/**
 * Elapsed time for `clock`: `performance.now()` for the system clock, the clock's own `monotonic()`
 * when it has one, and otherwise its `now()` held at its high-water mark, so that a clock set back (a
 * {@link ManualClock} in a test of a clock jump) stands still instead of running backwards.
 */
export function monotonicTime(clock: Clock): MonotonicTime {
  if (clock === systemClock) return () => performance.now();
  if (hasMonotonic(clock)) return () => clock.monotonic();
  let highest = Number.NEGATIVE_INFINITY;
  return () => {
    const now = clock.now();
    if (now > highest) highest = now;
    return highest;
  };
}
