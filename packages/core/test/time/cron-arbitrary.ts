import fc from 'fast-check';

/**
 * fast-check generators of valid cron expressions: every construct of the grammar (values, names,
 * ranges, steps, open steps, lists, `L`, `?`, 7 as Sunday, optional seconds), each step within its range.
 */

interface FieldShape {
  min: number;
  max: number;
  names?: string[];
  nameBase?: number;
}

const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const WEEKDAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

const SECOND: FieldShape = { min: 0, max: 59 };
const MINUTE: FieldShape = { min: 0, max: 59 };
const HOUR: FieldShape = { min: 0, max: 23 };
const DAY: FieldShape = { min: 1, max: 31 };
const MONTH: FieldShape = { min: 1, max: 12, names: MONTHS, nameBase: 1 };
const WEEKDAY: FieldShape = { min: 0, max: 7, names: WEEKDAYS, nameBase: 0 };

function value(shape: FieldShape, v: number, asName: boolean): string {
  if (asName && shape.names && shape.nameBase !== undefined) {
    // 7 (Sunday again) has no name of its own.
    const name = shape.names[v - shape.nameBase];
    if (name !== undefined) return name;
  }
  return String(v);
}

function item(shape: FieldShape): fc.Arbitrary<string> {
  const { min, max } = shape;
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc.tuple(fc.integer({ min, max }), fc.boolean()).map(([v, n]) => value(shape, v, n)),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(fc.integer({ min, max }), fc.integer({ min, max }), fc.boolean())
        .map(([a, b, n]) => `${value(shape, Math.min(a, b), n)}-${value(shape, Math.max(a, b), n)}`),
    },
    {
      weight: 2,
      arbitrary: fc
        .integer({ min, max: max - 1 })
        .chain((a) => fc.tuple(fc.constant(a), fc.integer({ min: a + 1, max })))
        .chain(([a, b]) => fc.integer({ min: 1, max: b - a }).map((step) => `${a}-${b}/${step}`)),
    },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min, max: max - 1 })
        .chain((a) => fc.integer({ min: 1, max: max - a }).map((step) => `${a}/${step}`)),
    },
  );
}

function field(shape: FieldShape, extra: string[] = []): fc.Arbitrary<string> {
  const starMax = shape === WEEKDAY ? 6 : shape.max;
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom('*', ...extra) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: starMax - shape.min }).map((n) => `*/${n}`) },
    { weight: 4, arbitrary: item(shape) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.uniqueArray(fc.integer({ min: shape.min, max: shape.max }), { minLength: 2, maxLength: 4 }),
          fc.boolean(),
        )
        .map(([values, names]) => values.map((v) => value(shape, v, names)).join(',')),
    },
    {
      weight: 1,
      arbitrary: fc.array(item(shape), { minLength: 2, maxLength: 3 }).map((items) => items.join(',')),
    },
  );
}

function dayOfMonth(): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: field(DAY, ['?']) },
    { weight: 1, arbitrary: fc.constant('L') },
    { weight: 1, arbitrary: item(DAY).map((i) => `${i},L`) },
  );
}

/** A valid 5- or 6-field expression (it may still never match, e.g. `0 0 30 2 *`, which parsing rejects). */
export function cronExpression(): fc.Arbitrary<string> {
  return fc
    .tuple(
      fc.option(field(SECOND), { freq: 3 }),
      field(MINUTE),
      field(HOUR),
      dayOfMonth(),
      field(MONTH),
      field(WEEKDAY, ['?']),
    )
    .map(([s, ...rest]) => (s === null ? rest : [s, ...rest]).join(' '));
}

/**
 * Expressions aimed at one wall-clock hour (a DST gap or overlap): the hour field is that hour alone, a
 * range or list around it, or a wildcard; minutes and seconds are single values, lists or steps.
 */
export function cronExpressionAround(hour: number): fc.Arbitrary<string> {
  const h = (d: number) => (hour + d + 24) % 24;
  const hours = fc.constantFrom(
    String(hour),
    String(hour),
    `${Math.max(0, hour - 1)}-${Math.min(23, hour + 1)}`,
    `${h(-1)},${hour}`,
    `${hour},${h(1)}`,
    '*',
    '*/2',
    `${Math.min(hour, 21)}-${Math.min(hour, 21) + 2}/2`,
  );
  const minutes = fc.oneof(
    { weight: 4, arbitrary: fc.integer({ min: 0, max: 59 }).map(String) },
    { weight: 1, arbitrary: fc.constantFrom('0,30', '*/15', '15-45/15', '*/20', '*', '10,40', '45') },
  );
  const seconds = fc.option(
    fc.oneof(fc.integer({ min: 0, max: 59 }).map(String), fc.constantFrom('*/30', '0,30')),
    {
      freq: 3,
    },
  );
  return fc
    .tuple(
      seconds,
      minutes,
      hours,
      fc.constantFrom('*', '*', '*', '1-31', '?'),
      fc.constantFrom('*', '*', '1-12'),
    )
    .map(([s, m, hh, dom, month]) => [...(s === null ? [] : [s]), m, hh, dom, month, '*'].join(' '));
}
