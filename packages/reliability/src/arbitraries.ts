import { MAX_KEY_LENGTH } from '@duetime/core';
import fc from 'fast-check';

/**
 * Hostile input for the fuzzing tests: values an application could pass by mistake or an attacker on
 * purpose. Each arbitrary mixes plain random values with the edges that break things (control
 * characters, lone surrogates, LIKE/GLOB metacharacters, lengths at the limits, NaN, -0, huge numbers,
 * invalid dates, prototype-less objects, getters, proxies of arrays…).
 */

/** Characters that mean something to SQL LIKE, GLOB, regular expressions, Redis patterns, NATS subjects. */
export const SPECIAL = [
  '%',
  '_',
  '*',
  '?',
  '[',
  ']',
  '\\',
  '/',
  '.',
  '>',
  ' ',
  '^',
  '$',
  '{',
  '}',
  ':',
  '"',
  "'",
];

/** One UTF-16 code unit of any value (lone surrogates and controls included). */
const codeUnit = fc.integer({ min: 0, max: 0xffff }).map((n) => String.fromCharCode(n));

/** Text of every kind: unicode, raw code units, metacharacters, and lengths around the key limit. */
export function hostileText(maxLength = 40): fc.Arbitrary<string> {
  return fc.oneof(
    fc.string({ maxLength }),
    fc.string({ unit: 'binary', maxLength }),
    fc.string({ unit: codeUnit, maxLength }),
    fc.string({ unit: fc.constantFrom(...SPECIAL, 'a', 'é', '😀', '\u0000', '\u007f', '\u200b'), maxLength }),
    fc.constantFrom(
      '',
      ' ',
      'a'.repeat(MAX_KEY_LENGTH),
      'a'.repeat(MAX_KEY_LENGTH + 1),
      '😀'.repeat(256),
      '\ud800',
    ),
  );
}

/** Special numbers and the values around them. */
export const hostileNumber: fc.Arbitrary<number> = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(
    0,
    -0,
    -1,
    1,
    1.5,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    -Infinity,
    2 ** 31,
    2 ** 53,
    1e300,
  ),
);

/** Anything at all (objects with odd prototypes, bigints, symbols are in `fc.anything`'s options). */
export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({
    withBigInt: true,
    withDate: true,
    withMap: true,
    withSet: true,
    withNullPrototype: true,
    withTypedArray: true,
    withSparseArray: true,
    withBoxedValues: true,
    withObjectString: true,
    maxDepth: 3,
  }),
  hostileNumber,
  fc.constantFrom(undefined, null, Symbol('s'), () => 1, new Date(Number.NaN), Object.create(null)),
);

/** A value for an option expecting a duration or a count. */
export const durationLike: fc.Arbitrary<unknown> = fc.oneof(hostileNumber, hostileValue);

/** A Date (valid or not, from -271821 to 275760) or something that is not one. */
export const dateLike: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.date({ noInvalidDate: false }) },
  { weight: 1, arbitrary: hostileValue },
);

/** A message-like value: mostly the right shape with hostile fields, sometimes not an object at all. */
export const messageLike: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record(
      {
        type: fc.oneof({ weight: 3, arbitrary: hostileText() }, { weight: 1, arbitrary: hostileValue }),
        aggregateId: fc.oneof(
          { weight: 3, arbitrary: hostileText() },
          { weight: 1, arbitrary: hostileValue },
        ),
        data: fc.oneof(fc.jsonValue({ maxDepth: 3 }), hostileValue),
      },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: hostileValue },
);

/** Cron expressions: random text, and field-shaped tokens assembled into 1 to 7 fields. */
export const cronLike: fc.Arbitrary<string> = fc.oneof(
  hostileText(30),
  fc
    .array(
      fc.oneof(
        fc.constantFrom(
          '*',
          '?',
          'L',
          'W',
          'LW',
          '5W',
          'L-3',
          '1#2',
          '5L',
          'MON',
          'jan',
          'SUN-SAT',
          'FOO',
          '*/0',
        ),
        fc.integer({ min: -5, max: 70 }).map(String),
        fc
          .tuple(fc.integer({ min: -2, max: 65 }), fc.integer({ min: -2, max: 65 }))
          .map(([a, b]) => `${a}-${b}`),
        fc
          .tuple(fc.constantFrom('*', '0', '5', '1-10'), fc.integer({ min: -1, max: 70 }))
          .map(([a, s]) => `${a}/${s}`),
        fc.array(fc.integer({ min: 0, max: 60 }), { minLength: 2, maxLength: 4 }).map((l) => l.join(',')),
        hostileText(4),
      ),
      { minLength: 1, maxLength: 7 },
    )
    .chain((fields) => fc.constantFrom(' ', '  ', '\t', ' \u00a0').map((sep) => fields.join(sep))),
  fc.constantFrom(
    '@hourly',
    '@daily',
    '@weekly',
    '@monthly',
    '@yearly',
    '@annually',
    '@reboot',
    '@every 5m',
    '@',
  ),
);

/** IANA zones (with DST oddities), and things that are not zones. */
export const zoneLike: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(
    'UTC',
    'Europe/Berlin',
    'America/New_York',
    'Australia/Lord_Howe',
    'Pacific/Chatham',
    'Asia/Kathmandu',
    'America/Santiago',
    'Africa/Casablanca',
  ),
  fc.constantFrom('local', '', '+01:00', 'GMT+1', 'Etc/GMT+14', 'europe/berlin', 'Mars/Olympus'),
  hostileText(20),
  hostileValue,
);

/** An options object built from `keys` with hostile values, sometimes with unknown keys too. */
export function optionsLike(keys: readonly string[], value: fc.Arbitrary<unknown> = hostileValue) {
  return fc.oneof(
    { weight: 4, arbitrary: fc.dictionary(fc.constantFrom(...keys), value, { maxKeys: keys.length }) },
    { weight: 1, arbitrary: fc.dictionary(hostileText(12), value, { maxKeys: 3 }) },
    { weight: 1, arbitrary: hostileValue },
  );
}
