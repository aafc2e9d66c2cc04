import { parseArgs } from 'node:util';
import { type DstPolicy, InvalidArgumentError, parseCron } from '@duetime/core';
import { DateTime } from 'luxon';
import { type CliIo, EXIT, table, UsageError } from '../io.js';
import { parseInstant } from './common.js';

export const nextHelp = `Usage:
  duetime next "<cron>" --tz <zone> [-n 10] [--from <iso>] [--dst skip|shift,both|first|last] [--json]

Prints the next occurrences of a cron expression in its zone and in UTC, marking occurrences that fall
in a DST gap (shifted) or in a repeated hour (first / second).
  --tz <zone>      the IANA zone the expression is evaluated in (required), e.g. Europe/Berlin
  -n <count>       how many occurrences (default 10, at most 1000)
  --from <iso>     start strictly after this instant (default: now), e.g. 2026-03-08T00:00:00Z
  --dst <policy>   gap policy and overlap policy, e.g. skip,both (default) or shift,first
  --json           print JSON`;

export const validateHelp = `Usage:
  duetime validate "<cron>" --tz <zone> [--dst <policy>] [--json]

Checks a cron expression: prints its description and next three occurrences, or the error naming the
field, the value and the reason (exit code 3).`;

const options = {
  tz: { type: 'string' },
  n: { type: 'string', short: 'n' },
  from: { type: 'string' },
  dst: { type: 'string' },
  json: { type: 'boolean', default: false },
} as const;

/** Parses `--dst gap,overlap` (either part may be given alone). */
export function parseDstOption(text: string): DstPolicy {
  const policy: DstPolicy = { gap: 'skip', overlap: 'both' };
  for (const part of text.split(',').map((p) => p.trim().toLowerCase())) {
    if (part === 'skip' || part === 'shift') policy.gap = part;
    else if (part === 'both' || part === 'first' || part === 'last') policy.overlap = part;
    else
      throw new InvalidArgumentError(
        '--dst',
        text,
        'must be gap and/or overlap policies: skip|shift and both|first|last',
      );
  }
  return policy;
}

function parse(expression: string | undefined, values: { tz?: string; dst?: string }, command: string) {
  if (expression === undefined) throw new UsageError(`${command} needs a "<cron>" expression`, command);
  if (values.tz === undefined)
    throw new UsageError(`${command} needs --tz <zone> (an IANA zone such as UTC or Europe/Berlin)`, command);
  const dst = values.dst === undefined ? undefined : parseDstOption(values.dst);
  return parseCron(expression, values.tz, dst ? { dst } : {});
}

/** What DST did to an occurrence, if anything: a time moved out of a gap, or one of a repeated hour. */
export function dstMark(instant: Date, zone: string): string {
  const t = instant.getTime();
  const here = DateTime.fromMillis(t, { zone });
  const before = DateTime.fromMillis(t - 1, { zone });
  if (before.offset < here.offset) return 'shifted out of a DST gap';
  // A repeated wall time: the same local time exists at another offset within the surrounding day.
  for (const probe of [t - 3 * 3_600_000, t + 3 * 3_600_000]) {
    const other = DateTime.fromMillis(probe, { zone }).offset;
    if (other === here.offset) continue;
    const twin = t + (here.offset - other) * 60_000;
    const twinLocal = DateTime.fromMillis(twin, { zone });
    if (
      twin !== t &&
      twinLocal.offset === other &&
      twinLocal.toFormat('yyyy-MM-dd HH:mm:ss') === here.toFormat('yyyy-MM-dd HH:mm:ss')
    ) {
      return twin > t ? 'repeated hour (first)' : 'repeated hour (second)';
    }
  }
  return '';
}

/** `duetime next` */
export async function nextCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options });
  const spec = parse(positionals[0], values, 'next');
  const count = values.n === undefined ? 10 : Number(values.n);
  if (!Number.isInteger(count) || count < 1 || count > 1000)
    throw new InvalidArgumentError('-n', values.n, 'must be an integer from 1 to 1000');
  let cursor = values.from === undefined ? new Date() : parseInstant('--from', values.from);
  const zone = spec.timeZone;
  const rows: { utc: string; local: string; offset: string; dst: string }[] = [];
  for (let i = 0; i < count; i++) {
    const next = spec.next(cursor);
    if (!next) break;
    const local = DateTime.fromJSDate(next, { zone });
    rows.push({
      utc: next.toISOString(),
      local: local.toFormat('yyyy-MM-dd HH:mm:ss ccc'),
      offset: local.toFormat('ZZ'),
      dst: dstMark(next, zone),
    });
    cursor = next;
  }
  if (values.json) {
    io.out(JSON.stringify({ expression: spec.toString(), zone, occurrences: rows }, null, 2));
    return EXIT.ok;
  }
  io.out(`${spec.toString()} in ${zone}`);
  io.out(
    table(
      [`LOCAL (${zone})`, 'OFFSET', 'UTC', 'DST'],
      rows.map((r) => [r.local, r.offset, r.utc, r.dst]),
    ),
  );
  if (rows.length < count)
    io.out(
      `no further occurrences within the search bound after ${rows.at(-1)?.utc ?? cursor.toISOString()}`,
    );
  return EXIT.ok;
}

/** `duetime validate` */
export async function validateCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options });
  const spec = parse(positionals[0], values, 'validate');
  const upcoming: string[] = [];
  let cursor = new Date();
  for (let i = 0; i < 3; i++) {
    const next = spec.next(cursor);
    if (!next) break;
    upcoming.push(next.toISOString());
    cursor = next;
  }
  if (values.json)
    io.out(JSON.stringify({ valid: true, description: spec.describe(), next: upcoming }, null, 2));
  else io.out(`valid: ${spec.toString()} in ${spec.timeZone}; next ${upcoming.join(', ') || '(none)'}`);
  return EXIT.ok;
}
