import { CronSyntaxError } from '../errors.js';

/**
 * The cron grammar: an expression in, the sets of values each field allows out. Everything that can be
 * wrong with an expression is found here, at parse time, and reported with the field, the text and why.
 */

/** Names of the cron fields, as used in {@link CronSyntaxError.field}. */
export type CronFieldName = 'second' | 'minute' | 'hour' | 'dayOfMonth' | 'month' | 'dayOfWeek';

/** How day-of-month and day-of-week combine (see the README, "Day-of-month and day-of-week"). */
export type DayRule = 'or' | 'and';

/** A parsed expression: the allowed values of each field, ascending. Day-of-week 7 is stored as 0. */
export interface CronFields {
  readonly seconds: readonly number[];
  readonly minutes: readonly number[];
  readonly hours: readonly number[];
  /** Days 1-31 listed explicitly; the last day of the month is {@link lastDayOfMonth}. */
  readonly daysOfMonth: readonly number[];
  /** `L` was given: the last day of each month matches. */
  readonly lastDayOfMonth: boolean;
  readonly months: readonly number[];
  readonly daysOfWeek: readonly number[];
  readonly dayRule: DayRule;
  /** The expression had a seconds field (6 fields). */
  readonly hasSeconds: boolean;
}

export const MONTH_NAMES = [
  'JAN',
  'FEB',
  'MAR',
  'APR',
  'MAY',
  'JUN',
  'JUL',
  'AUG',
  'SEP',
  'OCT',
  'NOV',
  'DEC',
];
export const WEEKDAY_NAMES = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];
const MONTH_FULL_NAMES = [
  'January',
  'February',
  'March',
  'April',
  'May',
  'June',
  'July',
  'August',
  'September',
  'October',
  'November',
  'December',
];

/** `@` macros and the 5-field expressions they stand for. */
export const CRON_MACROS: Readonly<Record<string, string>> = Object.freeze({
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
});

interface FieldRule {
  name: CronFieldName;
  min: number;
  max: number;
  /** Upper end of `a/n` (day-of-week runs to 7, Sunday again, as in Vixie cron). */
  openMax: number;
  names?: readonly string[];
  /** Value of names[0]. */
  nameBase?: number;
  label: string;
}

const RULES: Record<CronFieldName, FieldRule> = {
  second: { name: 'second', min: 0, max: 59, openMax: 59, label: 'seconds' },
  minute: { name: 'minute', min: 0, max: 59, openMax: 59, label: 'minutes' },
  hour: { name: 'hour', min: 0, max: 23, openMax: 23, label: 'hours' },
  dayOfMonth: { name: 'dayOfMonth', min: 1, max: 31, openMax: 31, label: 'day of month' },
  month: { name: 'month', min: 1, max: 12, openMax: 12, names: MONTH_NAMES, nameBase: 1, label: 'month' },
  dayOfWeek: {
    name: 'dayOfWeek',
    min: 0,
    max: 7,
    openMax: 7,
    names: WEEKDAY_NAMES,
    nameBase: 0,
    label: 'day of week',
  },
};

const FIELD_ORDER: CronFieldName[] = ['second', 'minute', 'hour', 'dayOfMonth', 'month', 'dayOfWeek'];
const MAX_EXPRESSION_LENGTH = 1024;

/**
 * Parses a cron expression into {@link CronFields}.
 *
 * @throws {CronSyntaxError} naming the field, its text and the reason.
 */
export function parseCronFields(expression: unknown): CronFields {
  if (typeof expression !== 'string')
    throw new CronSyntaxError('expression', expression, 'must be a string such as "*/5 * * * *"');
  const trimmed = expression.trim();
  if (trimmed === '')
    throw new CronSyntaxError('expression', expression, 'is empty; expected 5 or 6 fields or an @ macro');
  if (trimmed.length > MAX_EXPRESSION_LENGTH)
    throw new CronSyntaxError('expression', expression, `is longer than ${MAX_EXPRESSION_LENGTH} characters`);
  let source = trimmed;
  if (trimmed.startsWith('@')) {
    const expanded = CRON_MACROS[trimmed.toLowerCase()];
    if (expanded === undefined)
      throw new CronSyntaxError(
        'expression',
        expression,
        `unknown macro; expected one of ${Object.keys(CRON_MACROS).join(', ')}`,
      );
    source = expanded;
  }
  const parts = source.split(/\s+/);
  if (parts.length !== 5 && parts.length !== 6)
    throw new CronSyntaxError(
      'expression',
      expression,
      `has ${parts.length} field${parts.length === 1 ? '' : 's'}; expected 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)`,
    );
  const hasSeconds = parts.length === 6;
  const texts = hasSeconds ? parts : ['0', ...parts];
  const sets = new Map<CronFieldName, FieldSet>();
  FIELD_ORDER.forEach((name, i) => {
    sets.set(name, parseField(RULES[name], texts[i] as string, expression));
  });
  const dom = sets.get('dayOfMonth') as FieldSet;
  const dow = sets.get('dayOfWeek') as FieldSet;
  const months = sets.get('month') as FieldSet;
  const domText = texts[3] as string;
  const dowText = texts[5] as string;
  // Vixie cron's rule: a field starting with `*` (or `?`) counts as unrestricted, so the other one decides alone.
  const dayRule: DayRule = isStarLike(domText) || isStarLike(dowText) ? 'and' : 'or';
  const daysOfWeek = [...new Set([...dow.values].map((d) => (d === 7 ? 0 : d)))].sort((a, b) => a - b);
  if (dayRule === 'and') checkReachable(dom, months, domText, expression);
  return Object.freeze({
    seconds: Object.freeze([...(sets.get('second') as FieldSet).values]),
    minutes: Object.freeze([...(sets.get('minute') as FieldSet).values]),
    hours: Object.freeze([...(sets.get('hour') as FieldSet).values]),
    daysOfMonth: Object.freeze([...dom.values]),
    lastDayOfMonth: dom.last,
    months: Object.freeze([...months.values]),
    daysOfWeek: Object.freeze(daysOfWeek),
    dayRule,
    hasSeconds,
  });
}

function isStarLike(text: string): boolean {
  return text.startsWith('*') || text.startsWith('?');
}

interface FieldSet {
  values: number[];
  last: boolean;
}

const MAX_DAYS = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Rejects a day-of-month list that no allowed month can ever hold (`0 0 30 2 *`). */
function checkReachable(dom: FieldSet, months: FieldSet, text: string, expression: string): void {
  if (dom.last) return;
  const smallest = dom.values[0] as number;
  if (months.values.some((m) => smallest <= (MAX_DAYS[m] as number))) return;
  const monthList = months.values.map((m) => MONTH_FULL_NAMES[m - 1] as string);
  const shown =
    monthList.length === 1
      ? monthList[0]
      : `${monthList.slice(0, -1).join(', ')} or ${monthList[monthList.length - 1]}`;
  const days =
    dom.values.length === 1 ? `day ${smallest} never occurs` : `days ${dom.values.join(',')} never occur`;
  throw new CronSyntaxError('dayOfMonth', text, `never matches: ${days} in ${shown}`, expression);
}

function parseField(rule: FieldRule, text: string, expression: string): FieldSet {
  const fail = (reason: string): never => {
    throw new CronSyntaxError(rule.name, text, reason, expression);
  };
  const allowed = new Set<number>();
  let last = false;
  const items = text.split(',');
  for (const item of items) {
    if (item === '') fail('has an empty list item');
    const unsupported = unsupportedSyntax(rule, item);
    if (unsupported !== undefined) fail(unsupported);
    const slash = item.indexOf('/');
    const base = slash < 0 ? item : item.slice(0, slash);
    const stepText = slash < 0 ? undefined : item.slice(slash + 1);
    if (stepText?.includes('/')) fail(`"${item}" has more than one "/"`);
    if (base === 'L' || base === 'l') {
      if (rule.name !== 'dayOfMonth')
        fail(`"L" is only supported in the day-of-month field (last day of the month)`);
      if (stepText !== undefined) fail('"L" cannot take a step');
      last = true;
      continue;
    }
    let lo: number;
    let hi: number;
    if (base === '*' || base === '?') {
      if (base === '?' && rule.name !== 'dayOfMonth' && rule.name !== 'dayOfWeek')
        fail('"?" is only allowed in the day-of-month and day-of-week fields');
      lo = rule.min;
      hi = rule.name === 'dayOfWeek' ? 6 : rule.max;
    } else {
      const dash = base.indexOf('-');
      if (dash === 0) fail(`"${base}" is not a number (values are never negative)`);
      if (dash > 0) {
        lo = parseValue(rule, base.slice(0, dash), item, fail);
        const endText = base.slice(dash + 1);
        hi = parseValue(rule, endText, item, fail);
        // `FRI-SUN` reads naturally; SUN as the end of a range means 7.
        if (rule.name === 'dayOfWeek' && hi === 0 && endText.toUpperCase() === 'SUN' && lo > 0) hi = 7;
        if (lo > hi) fail(`range ${base} is reversed (${lo} > ${hi}); ranges do not wrap`);
      } else {
        lo = parseValue(rule, base, item, fail);
        hi = lo;
        if (stepText !== undefined) {
          hi = rule.openMax;
        }
      }
    }
    let step = 1;
    if (stepText !== undefined) {
      if (!/^\d+$/.test(stepText)) fail(`step "${stepText}" is not a whole number`);
      step = Number(stepText);
      if (step === 0) fail('step 0 never advances; steps start at 1');
      if (hi === lo) fail(`step ${step} applies to the single value ${lo}; a step needs a range`);
      if (step > hi - lo)
        fail(`step ${step} is larger than the range ${lo}-${hi} it applies to (at most ${hi - lo})`);
    }
    for (let v = lo; v <= hi; v += step) allowed.add(v);
  }
  return { values: [...allowed].sort((a, b) => a - b), last };
}

function parseValue(rule: FieldRule, text: string, item: string, fail: (reason: string) => never): number {
  if (/^\d+$/.test(text)) {
    const value = Number(text);
    if (value < rule.min || value > rule.max)
      fail(`${value} is out of range for ${rule.label} (${rule.min}-${rule.max})`);
    return value;
  }
  if (/^[A-Za-z]+$/.test(text)) {
    if (rule.names === undefined)
      fail(`"${text}" is not a number; names are only allowed in the month and day-of-week fields`);
    const index = (rule.names as readonly string[]).indexOf(text.toUpperCase());
    if (index < 0)
      fail(
        `unknown ${rule.label} name "${text}"; expected one of ${(rule.names as readonly string[]).join(', ')}`,
      );
    return index + (rule.nameBase as number);
  }
  if (text === '') fail(`"${item}" has an empty range end`);
  return fail(`"${text}" is not a number${rule.names ? ' or a name' : ''}`);
}

/** Extensions of other cron dialects, named so that the error says what is not supported rather than "bad". */
function unsupportedSyntax(rule: FieldRule, item: string): string | undefined {
  if (item.includes('#')) return `"${item}": "#" (nth weekday of the month) is not supported`;
  if (/^H(?:$|\(|\/)/i.test(item)) return `"${item}": "H" (hashed values) is not supported`;
  if (rule.name === 'dayOfMonth' && /^(?:\d+W|LW|L-\d+)$/i.test(item))
    return `"${item}": "W" (nearest weekday) and "L-n" are not supported; "L" alone is`;
  if (rule.name === 'dayOfWeek' && /^(?:\d|[A-Za-z]{3})L$/i.test(item))
    return `"${item}": "L" in day-of-week (last weekday of the month) is not supported`;
  return undefined;
}
