import { parseArgs } from 'node:util';
import { type DstPolicy, InvalidArgumentError, parseCron } from '@duetime/core';
import { DateTime } from 'luxon';
import { type CliIo, EXIT, table, UsageError } from '../io.js';
import { parseInstant } from './common.js';

export const nextHelp = `Usage:
  duetime next "<cron>" --tz <zone> [-n 10] [--from <iso>] [--dst skip|shift,both|first|last] [--json]

Prints the next occurrences of a cron expression in its zone and in UTC, marking occurrences that fall
in a DST gap (shifted) or in a repeated hour (first / second), and, with the default gap policy (skip),
the local times a DST gap swallowed (listed as skipped, between the occurrences around them).
  --tz <zone>      the IANA zone the expression is evaluated in (required), e.g. Europe/Berlin;
                   --zone <zone> is the same option
  -n <count>       how many occurrences (default 10, at most 1000)
  --from <iso>     start strictly after this instant (default: now), e.g. 2026-03-08T00:00:00Z
  --dst <policy>   gap policy and overlap policy, e.g. skip,both (default) or shift,first
  --json           print JSON`;

export const validateHelp = `Usage:
  duetime validate "<cron>" --tz <zone> [--dst <policy>] [--json]

Checks a cron expression: prints its description and next three occurrences, or the error naming the
field, the value and the reason (exit code 3).
  --tz <zone>      the IANA zone the expression is evaluated in (required); --zone <zone> is the same
  --dst <policy>   gap policy and overlap policy, e.g. skip,both (default) or shift,first
  --json           print JSON`;

const options = {
  tz: { type: 'string' },
  zone: { type: 'string' },
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

/** `--tz`, or its alias `--zone`; giving both with different zones is a usage error. */
function zoneOf(values: { tz?: string; zone?: string }, command: string): string {
  if (values.tz !== undefined && values.zone !== undefined && values.tz !== values.zone)
    throw new UsageError(
      `--tz ${JSON.stringify(values.tz)} and --zone ${JSON.stringify(values.zone)} disagree; --zone is another name for --tz, give one`,
      command,
    );
  const zone = values.tz ?? values.zone;
  if (zone === undefined)
    throw new UsageError(`${command} needs --tz <zone> (an IANA zone such as UTC or Europe/Berlin)`, command);
  return zone;
}

function parse(
  expression: string | undefined,
  values: { tz?: string; zone?: string; dst?: string },
  command: string,
) {
  if (expression === undefined) throw new UsageError(`${command} needs a "<cron>" expression`, command);
  const zone = zoneOf(values, command);
  const dst = values.dst === undefined ? undefined : parseDstOption(values.dst);
  return parseCron(expression, zone, dst ? { dst } : {});
}

const DAY = 86_400_000;

/** The instants in (from, to] where `zone`'s UTC offset grows (a DST gap opens), with the offsets around. */
function gapsBetween(
  zone: string,
  from: number,
  to: number,
): { at: number; before: number; after: number }[] {
  const offset = (t: number) => DateTime.fromMillis(t, { zone }).offset;
  const gaps: { at: number; before: number; after: number }[] = [];
  // Offsets change at most a few times a year: look day by day, then bisect to the millisecond.
  const end = Math.min(to, from + 400 * DAY);
  for (let a = from; a < end; a += DAY) {
    const b = Math.min(a + DAY, end);
    const before = offset(a);
    const after = offset(b);
    if (after <= before) continue;
    let lo = a;
    let hi = b;
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (offset(mid) === before) lo = mid;
      else hi = mid;
    }
    gaps.push({ at: hi, before, after });
  }
  return gaps;
}

/**
 * The local times in (from, to) that the expression names but that do not exist, because a DST gap
 * swallowed them (the `skip` policy runs nothing for them). Found by reading the expression on the wall
 * clock of the offset before the gap, over the gap's length. Offsets that no `Etc/GMT±h` zone has (a
 * 30-minute DST shift) are not reported.
 */
export function skippedInGaps(expression: string, zone: string, from: Date, to: Date | undefined): string[] {
  const skipped: string[] = [];
  const end = to?.getTime() ?? from.getTime() + 400 * DAY;
  for (const gap of gapsBetween(zone, from.getTime(), end)) {
    if (gap.before % 60 !== 0) continue;
    const hours = gap.before / 60;
    const fixed = hours === 0 ? 'Etc/GMT' : `Etc/GMT${hours > 0 ? '-' : '+'}${Math.abs(hours)}`;
    let spec: ReturnType<typeof parseCron>;
    try {
      spec = parseCron(expression, fixed);
    } catch {
      continue;
    }
    const gapEnd = gap.at + (gap.after - gap.before) * 60_000;
    for (const at of spec.occurrences(new Date(gap.at - 1), new Date(gapEnd)))
      if (at.getTime() >= gap.at)
        skipped.push(DateTime.fromJSDate(at, { zone: fixed }).toFormat('yyyy-MM-dd HH:mm:ss ccc'));
  }
  return skipped;
}

/**
 * What DST did to an occurrence, if anything: a time moved out of a gap (only the `shift` gap policy moves
 * times; under `skip` an occurrence right after a gap is an ordinary one), or one of a repeated hour.
 */
export function dstMark(instant: Date, zone: string, gap: 'skip' | 'shift' = 'shift'): string {
  const t = instant.getTime();
  const here = DateTime.fromMillis(t, { zone });
  const before = DateTime.fromMillis(t - 1, { zone });
  if (gap === 'shift' && before.offset < here.offset) return 'shifted out of a DST gap';
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
  // With the skip policy (the default) a local time a DST gap swallows has no row of its own: say so.
  const markSkipped = spec.dst.gap === 'skip';
  const rows: { utc: string; local: string; offset: string; dst: string }[] = [];
  const skipped: { local: string; reason: string }[] = [];
  const table_: string[][] = [];
  for (let i = 0; i < count; i++) {
    const next = spec.next(cursor);
    if (markSkipped)
      for (const local of skippedInGaps(spec.toString(), zone, cursor, next)) {
        const reason = 'skipped: this local time does not exist (DST gap)';
        skipped.push({ local, reason });
        table_.push([local, '', '', reason]);
      }
    if (!next) break;
    const local = DateTime.fromJSDate(next, { zone });
    const row = {
      utc: next.toISOString(),
      local: local.toFormat('yyyy-MM-dd HH:mm:ss ccc'),
      offset: local.toFormat('ZZ'),
      dst: dstMark(next, zone, spec.dst.gap),
    };
    rows.push(row);
    table_.push([row.local, row.offset, row.utc, row.dst]);
    cursor = next;
  }
  if (values.json) {
    io.out(
      JSON.stringify(
        { expression: spec.toString(), zone, occurrences: rows, ...(skipped.length > 0 ? { skipped } : {}) },
        null,
        2,
      ),
    );
    return EXIT.ok;
  }
  io.out(`${spec.toString()} in ${zone}`);
  io.out(table([`LOCAL (${zone})`, 'OFFSET', 'UTC', 'DST'], table_));
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
