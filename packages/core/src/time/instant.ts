import { InvalidArgumentError } from '../errors.js';

/**
 * The checks on instants every method of the time engine runs before it searches: a bad instant is a
 * typed error naming the argument, never a search that runs forever or an answer that means "none".
 */

/** Reads a `Date` argument as epoch milliseconds, rejecting anything else (and invalid Dates). */
export function instantOf(field: string, value: unknown): number {
  const ms = value instanceof Date ? value.getTime() : Number.NaN;
  if (Number.isNaN(ms))
    throw new InvalidArgumentError(
      field,
      value,
      value instanceof Date ? 'is an invalid Date' : 'must be a Date',
    );
  return ms;
}

/**
 * Rejects an epoch-milliseconds argument that is not a number, or is NaN. Infinities are accepted: they
 * stand for "before every occurrence" and "after every occurrence", and the searches clamp them.
 */
export function checkEpochMs(field: string, value: unknown): void {
  if (typeof value !== 'number' || Number.isNaN(value))
    throw new InvalidArgumentError(
      field,
      value,
      'must be a number of epoch milliseconds (NaN usually comes from an invalid Date or from undefined in arithmetic)',
    );
}
