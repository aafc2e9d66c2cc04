import { randomInt } from 'node:crypto';

/**
 * A small seeded pseudo-random generator (sfc32), so that every random choice of a run (which worker is
 * killed when, which schedule is replaced, which fault comes next) can be replayed from its seed.
 */
export class Random {
  readonly seed: number;
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  constructor(seed: number) {
    this.seed = seed >>> 0;
    this.#a = 0x9e3779b9;
    this.#b = 0x243f6a88;
    this.#c = 0xb7e15162;
    this.#d = this.seed;
    for (let i = 0; i < 16; i++) this.next();
  }

  /** A float in [0, 1). */
  next(): number {
    this.#a >>>= 0;
    this.#b >>>= 0;
    this.#c >>>= 0;
    this.#d >>>= 0;
    const t = (this.#a + this.#b + this.#d) >>> 0;
    this.#d = (this.#d + 1) >>> 0;
    this.#a = this.#b ^ (this.#b >>> 9);
    this.#b = (this.#c + (this.#c << 3)) >>> 0;
    this.#c = (this.#c << 21) | (this.#c >>> 11);
    this.#c = (this.#c + t) >>> 0;
    return t / 4294967296;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[Math.floor(this.next() * items.length)] as T;
  }

  /** A generator for a sub-task, derived from this one (so adding a sub-task does not shift the others). */
  fork(label: string): Random {
    let h = this.seed ^ 0x811c9dc5;
    for (let i = 0; i < label.length; i++) h = Math.imul(h ^ label.charCodeAt(i), 0x01000193);
    return new Random(h >>> 0);
  }
}

/**
 * The seed of this run: `DUETIME_CHAOS_SEED` when set (to replay a failure), a fresh one otherwise.
 * Printed by every test that uses it, together with the variable to set.
 */
export function runSeed(): number {
  const given = process.env.DUETIME_CHAOS_SEED;
  if (given !== undefined && given !== '') {
    const seed = Number(given);
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff)
      throw new Error(
        `DUETIME_CHAOS_SEED must be an integer in [0, 4294967295], not ${JSON.stringify(given)}`,
      );
    return seed;
  }
  return randomInt(0, 0xffffffff);
}
