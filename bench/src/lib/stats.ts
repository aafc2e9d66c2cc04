/** Summary statistics for benchmark samples. */

export function sorted(values: readonly number[]): number[] {
  return [...values].sort((a, b) => a - b);
}

/** The p-th percentile (0–100) by nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const s = sorted(values);
  const rank = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[rank]!;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = sorted(values);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export interface Summary {
  median: number;
  min: number;
  max: number;
  samples: number[];
}

export function summarize(samples: readonly number[]): Summary {
  const s = sorted(samples);
  return { median: median(s), min: s[0] ?? Number.NaN, max: s.at(-1) ?? Number.NaN, samples: [...samples] };
}

/** Formats a number with a sensible precision and thousands separators. */
export function fmt(value: number, digits = 0): string {
  if (value === Number.POSITIVE_INFINITY) return '∞';
  if (!Number.isFinite(value)) return 'n/a';
  return value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

/** A ratio: two decimals, or two significant digits below 0.1 (so 0.0025 does not print as 0.00). */
export function fmtRatio(value: number): string {
  if (Number.isFinite(value) && value !== 0 && Math.abs(value) < 0.1) return value.toPrecision(2);
  return fmt(value, 2);
}

/** `median (min–max)` */
export function fmtSummary(s: Summary, digits = 0): string {
  return `${fmt(s.median, digits)} (${fmt(s.min, digits)}–${fmt(s.max, digits)})`;
}
