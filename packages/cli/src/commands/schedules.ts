import { type ParseArgsConfig, parseArgs } from 'node:util';
import {
  type Backend,
  type DeadLetterRecord,
  describeStoredRecurrence,
  InvalidArgumentError,
  NotFoundError,
  type Schedule,
  scheduleKey,
  schedulePrefix,
  upcomingOccurrences,
} from '@duetime/core';
import { type CliIo, EXIT, isNotFound, table, UsageError } from '../io.js';
import { openBackend, parseBackendTarget } from '../open-backend.js';
import { backendOptions, backendUrl, parseInstant } from './common.js';
import { pause, resume, trigger } from './operations.js';

type Options = NonNullable<ParseArgsConfig['options']>;
export type Values = Record<string, string | boolean | undefined>;

/** What a subcommand gets: the opened backend and its parsed arguments. */
export interface SubcommandContext {
  backend: Backend;
  values: Values;
  positionals: string[];
  io: CliIo;
}

/**
 * One `duetime schedules <name>` subcommand. Adding one (say `retry <key>`) is adding an entry to
 * {@link SUBCOMMANDS}; an option for an existing one (say `list --dead`) is a field in its `options`.
 */
export interface Subcommand {
  /** The usage line after `duetime schedules `. */
  usage: string;
  /** Its own options (`--backend` and `--json` are common to all). */
  options: Options;
  /**
   * Checks the arguments before the backend is opened, so a usage error never waits for a connection.
   */
  check?(values: Values, positionals: string[]): void;
  run(context: SubcommandContext): Promise<number>;
}

const common = { ...backendOptions, json: { type: 'boolean', default: false } } as const satisfies Options;

/** Most schedules counted (without their messages) beyond those listed, and before a cancel by prefix. */
const COUNT_MAX = 100_000;

/** How many occurrences of a recurring schedule `show` and `--json` list (the pending one first). */
const UPCOMING = 5;

/** Keys and fields of a schedule for `--json`. */
function toJson(s: Schedule) {
  const lastError = (s as { lastError?: unknown }).lastError;
  return {
    key: s.key,
    at: s.at.toISOString(),
    version: s.version,
    attempts: s.attempts,
    dueAt: s.dueAt.toISOString(),
    ...(typeof lastError === 'string' ? { lastError } : {}),
    message: s.message,
    ...(s.paused
      ? {
          paused: {
            at: s.paused.at.toISOString(),
            ...(s.paused.note !== undefined ? { note: s.paused.note } : {}),
          },
        }
      : {}),
    ...(s.queue?.length ? { queued: s.queue.map((q) => ({ ...q, at: new Date(q.at).toISOString() })) } : {}),
    ...(s.recurrence
      ? {
          recurrence: {
            ...s.recurrence,
            description: describeStoredRecurrence(s.recurrence),
            upcoming: upcomingOccurrences(s.recurrence, s.at, UPCOMING).map((d) => d.toISOString()),
          },
        }
      : {}),
  };
}

/** Fields of a dead letter for `--json`. */
function deadJson(d: DeadLetterRecord) {
  return {
    key: d.key,
    version: d.version,
    at: d.at.toISOString(),
    deadAt: d.deadAt.toISOString(),
    attempts: d.attempts,
    error: d.error,
    message: d.message,
  };
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

const list: Subcommand = {
  usage: 'list [--through <iso>] [--prefix <p>] [--limit <n>] [--dead] [--json]',
  options: {
    through: { type: 'string' },
    prefix: { type: 'string' },
    limit: { type: 'string' },
    dead: { type: 'boolean', default: false },
  },
  check(values) {
    if (values.through !== undefined) parseInstant('--through', values.through as string);
    if (values.dead && values.through !== undefined)
      throw new UsageError(
        '--through does not apply to --dead (dead letters are listed by key)',
        'schedules',
      );
    if (values.prefix !== undefined) schedulePrefix(values.prefix as string, '--prefix');
    limitOf(values);
  },
  async run(context) {
    if (context.values.dead) return listDead(context);
    const { backend, values, io } = context;
    const through =
      values.through === undefined ? undefined : parseInstant('--through', values.through as string);
    const prefix = values.prefix as string | undefined;
    const limit = limitOf(values);
    const filters = { ...(through ? { through } : {}), ...(prefix !== undefined ? { prefix } : {}) };
    const rows: Schedule[] = [];
    for await (const s of backend.store.iterateSchedules({ ...filters, limit: Math.min(limit, 500) })) {
      rows.push(s);
      if (rows.length >= limit) break;
    }
    // Beyond the rows shown, only counted: the store reads no message to count.
    const matching =
      rows.length < limit
        ? rows.length
        : await backend.store.countSchedules({ ...filters, limit: COUNT_MAX });
    if (values.json) {
      io.out(JSON.stringify(rows.map(toJson), null, 2));
      return EXIT.ok;
    }
    if (rows.length === 0) {
      io.out('no pending schedules');
      return EXIT.ok;
    }
    io.out(
      table(
        ['KEY', 'AT (UTC)', 'VERSION', 'ATTEMPTS', 'TYPE', 'AGGREGATE', 'RECURS'],
        rows.map((s) => [
          s.key,
          s.at.toISOString(),
          String(s.version),
          String(s.attempts),
          s.message.type,
          s.message.aggregateId ?? '',
          s.recurrence ? describeStoredRecurrence(s.recurrence) : '',
        ]),
      ),
    );
    io.out(
      rows.length < matching
        ? `${rows.length} of ${matching >= COUNT_MAX ? 'at least ' : ''}${plural(matching, 'schedule')} shown (--limit ${rows.length})`
        : plural(rows.length, 'schedule'),
    );
    return EXIT.ok;
  },
};

/** `list --dead`: dead letters by key, page by page. */
async function listDead({ backend, values, io }: SubcommandContext): Promise<number> {
  const prefix = values.prefix as string | undefined;
  const limit = limitOf(values);
  const rows: DeadLetterRecord[] = [];
  let more = false;
  let after: string | undefined;
  for (;;) {
    const page = await backend.store.pageDeadLetters({
      ...(prefix !== undefined ? { prefix } : {}),
      ...(after !== undefined ? { after } : {}),
      limit: 500,
    });
    for (const d of page.items) {
      if (rows.length >= limit) {
        more = true;
        break;
      }
      rows.push(d);
    }
    if (more || !page.next) break;
    after = page.next;
  }
  if (values.json) {
    io.out(JSON.stringify(rows.map(deadJson), null, 2));
    return EXIT.ok;
  }
  if (rows.length === 0) {
    io.out('no dead letters');
    return EXIT.ok;
  }
  io.out(
    table(
      ['KEY', 'DEAD AT (UTC)', 'VERSION', 'ATTEMPTS', 'TYPE', 'ERROR'],
      rows.map((d) => [
        d.key,
        d.deadAt.toISOString(),
        String(d.version),
        String(d.attempts),
        d.message.type,
        d.error.length > 80 ? `${d.error.slice(0, 79)}…` : d.error,
      ]),
    ),
  );
  io.out(
    more
      ? `${rows.length} dead letters shown (--limit ${rows.length}; more exist)`
      : plural(rows.length, 'dead letter'),
  );
  return EXIT.ok;
}

function limitOf(values: Values): number {
  if (values.limit === undefined) return Number.POSITIVE_INFINITY;
  const limit = Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1)
    throw new InvalidArgumentError('--limit', values.limit, 'must be a positive integer');
  return limit;
}

const show: Subcommand = {
  usage: 'show <key> [--json]',
  options: {},
  check(_values, positionals) {
    if (positionals[0] === undefined) throw new UsageError('schedules show needs a <key>', 'schedules');
    scheduleKey(positionals[0]);
  },
  async run({ backend, values, positionals, io }) {
    const key = positionals[0] as string;
    const s = await backend.store.loadSchedule(key);
    if (!s) {
      io.err(`no pending schedule under ${JSON.stringify(key)}`);
      return EXIT.failed;
    }
    const json = toJson(s);
    if (values.json) {
      io.out(JSON.stringify(json, null, 2));
      return EXIT.ok;
    }
    // A paused schedule's own deliveries wait (its due time is far ahead); a queued one may come first.
    const retried = s.paused
      ? ' (paused)'
      : s.attempts > 0 && s.dueAt.getTime() !== s.at.getTime()
        ? ` (retry after ${plural(s.attempts, 'failed attempt')})`
        : '';
    io.out(
      [
        `key:        ${s.key}`,
        `at:         ${json.at}`,
        `due at:     ${json.dueAt}${retried}`,
        `attempts:   ${s.attempts} failed`,
        ...(json.lastError !== undefined ? [`last error: ${json.lastError}`] : []),
        ...(json.paused
          ? [
              `paused:     since ${json.paused.at}${json.paused.note !== undefined ? ` (${json.paused.note})` : ''}`,
            ]
          : []),
        ...(json.queued
          ? [`queued:     ${json.queued.map((q) => `${q.at} ${q.kind}`).join('\n            ')}`]
          : []),
        `version:    ${s.version}`,
        `type:       ${s.message.type}`,
        ...(s.message.aggregateId !== undefined ? [`aggregate:  ${s.message.aggregateId}`] : []),
        `data:       ${JSON.stringify(s.message.data ?? null)}`,
        ...(s.recurrence ? recurrenceLines(s) : []),
      ].join('\n'),
    );
    return EXIT.ok;
  },
};

/** What `show` prints of a recurring schedule: its spec, bounds, runs so far and what comes next. */
function recurrenceLines(s: Schedule): string[] {
  const r = s.recurrence!;
  const upcoming = upcomingOccurrences(r, s.at, UPCOMING);
  return [
    `recurs:     ${describeStoredRecurrence(r)}`,
    `runs:       ${r.count} so far${r.maxOccurrences !== undefined ? ` of at most ${r.maxOccurrences}` : ''}` +
      `${r.endAt !== undefined ? `, until ${new Date(r.endAt).toISOString()}` : ''}; catch-up ${typeof r.catchUp === 'string' ? r.catchUp : `max ${r.catchUp.max}`}`,
    `upcoming:   ${upcoming.map((d) => d.toISOString()).join('\n            ')}${upcoming.length < UPCOMING ? '\n            (then the recurrence ends)' : ''}`,
  ];
}

/** `retry <key>`: schedules a dead letter again and removes it. */
const retry: Subcommand = {
  usage: 'retry <key> [--at <iso>] [--as <key>]',
  options: { at: { type: 'string' }, as: { type: 'string' } },
  check(values, positionals) {
    if (positionals[0] === undefined)
      throw new UsageError('schedules retry needs the <key> of a dead letter', 'schedules');
    scheduleKey(positionals[0]);
    if (values.at !== undefined) parseInstant('--at', values.at as string);
    if (values.as !== undefined) scheduleKey(values.as as string, '--as');
  },
  async run({ backend, values, positionals, io }) {
    const key = positionals[0] as string;
    const at = values.at === undefined ? undefined : parseInstant('--at', values.at as string);
    const asKey = values.as as string | undefined;
    const done = await backend.store.transact((tx) =>
      tx.retryDeadLetter(key, { ...(at ? { at } : {}), ...(asKey !== undefined ? { asKey } : {}) }),
    );
    if (values.json) io.out(JSON.stringify({ retried: done ? 1 : 0 }));
    else
      io.out(
        done
          ? `scheduled ${asKey ?? key} again${at ? ` at ${at.toISOString()}` : ''}; the dead letter is removed`
          : `no dead letter under ${JSON.stringify(key)}`,
      );
    return done ? EXIT.ok : EXIT.failed;
  },
};

/** `discard <key>`: removes a dead letter. */
const discard: Subcommand = {
  usage: 'discard <key>',
  options: {},
  check(_values, positionals) {
    if (positionals[0] === undefined)
      throw new UsageError('schedules discard needs the <key> of a dead letter', 'schedules');
    scheduleKey(positionals[0]);
  },
  async run({ backend, values, positionals, io }) {
    const key = positionals[0] as string;
    const done = await backend.store.transact((tx) => tx.discardDeadLetter(key));
    if (values.json) io.out(JSON.stringify({ discarded: done ? 1 : 0 }));
    else
      io.out(done ? `discarded the dead letter under ${key}` : `no dead letter under ${JSON.stringify(key)}`);
    return done ? EXIT.ok : EXIT.failed;
  },
};

const cancel: Subcommand = {
  usage: 'cancel <key> | cancel --prefix <p> [--yes]',
  options: { prefix: { type: 'string' }, yes: { type: 'boolean', short: 'y', default: false } },
  check(values, positionals) {
    const key = positionals[0];
    if (values.prefix !== undefined) {
      if (key !== undefined) throw new UsageError('give either a <key> or --prefix, not both', 'schedules');
      schedulePrefix(values.prefix as string, '--prefix');
    } else if (key === undefined)
      throw new UsageError('schedules cancel needs a <key> or --prefix <p>', 'schedules');
    else scheduleKey(key);
  },
  async run({ backend, values, positionals, io }) {
    if (values.prefix !== undefined) return cancelPrefix(backend, values, io);
    const key = positionals[0] as string;
    const cancelled = await backend.store.transact((tx) => tx.cancelSchedule(key));
    if (values.json) io.out(JSON.stringify({ cancelled: cancelled ? 1 : 0 }));
    else io.out(cancelled ? `cancelled ${key}` : `no pending schedule under ${JSON.stringify(key)}`);
    return cancelled ? EXIT.ok : EXIT.failed;
  },
};

async function cancelPrefix(backend: Backend, values: Values, io: CliIo): Promise<number> {
  const prefix = values.prefix as string;
  const count = await backend.store.countSchedules({ prefix, limit: COUNT_MAX });
  const many = `${count >= COUNT_MAX ? 'at least ' : ''}${count}`;
  if (count === 0) {
    io.out(
      values.json
        ? JSON.stringify({ cancelled: 0 })
        : `no pending schedules under the prefix ${JSON.stringify(prefix)}`,
    );
    return EXIT.ok;
  }
  if (count > 1 && !values.yes) {
    const ok = await io.confirm(`cancel ${many} schedules under the prefix ${JSON.stringify(prefix)}?`);
    if (!ok) {
      io.err(`not cancelled: ${many} schedules match; pass --yes to cancel without asking`);
      return EXIT.failed;
    }
  }
  if (io.isTTY) io.err(`cancelling ${many} schedules…`);
  const cancelled = await backend.store.transact((tx) => tx.cancelSchedulePrefix(prefix));
  io.out(values.json ? JSON.stringify({ cancelled }) : `cancelled ${plural(cancelled, 'schedule')}`);
  return EXIT.ok;
}

/** The subcommands of `duetime schedules`, in the order help lists them. */
const SUBCOMMANDS: Record<string, Subcommand> = {
  list,
  show,
  cancel,
  pause,
  resume,
  trigger,
  retry,
  discard,
};

export const schedulesHelp = `Usage:
${Object.values(SUBCOMMANDS)
  .map((s) => `  duetime schedules ${s.usage}`)
  .join('\n')}

Inspect and cancel pending schedules (one-shot and recurring: show lists a recurring one's next
occurrences); pause and resume one, or trigger an extra delivery of it; list, retry or discard dead
letters. These commands never create or migrate a store: when there is none at the backend URL, they say
so and exit 1 (duetime run creates it).
  --through <iso>   only schedules due at or before this instant
  --prefix <p>      only keys starting with this literal prefix
  --limit <n>       at most n rows (default: all, read page by page)
  --dead            list dead letters (by key) instead of pending schedules
  --at <iso>        retry: when to deliver again; trigger: when to make the extra delivery (default now)
  --as <key>        retry: schedule it under another key
  --yes, -y         cancel several schedules without asking
  --note <text>     pause: a note kept with the pause (shown by show)
  --catch-up <how>  resume: what to do with occurrences missed while paused: latest (run the latest),
                    skip (run none) or n (run at most the n latest); default the schedule's own rule
  --json            print data as JSON
  --backend <url>   sqlite:./duetime.db (default), postgres://…, redis://…, nats://… (or DUETIME_BACKEND);
                    the store's location as a parameter: ?tablePrefix=, ?schema=, ?prefix=`;

/** `duetime schedules …` */
export async function schedulesCommand(args: string[], io: CliIo): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined)
    throw new UsageError(`schedules needs a subcommand: ${Object.keys(SUBCOMMANDS).join(', ')}`, 'schedules');
  const sub = SUBCOMMANDS[name];
  if (!sub)
    throw new UsageError(
      `unknown subcommand schedules ${name}; use ${Object.keys(SUBCOMMANDS).join(', ')}`,
      'schedules',
    );
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { ...common, ...sub.options },
  });
  sub.check?.(values, positionals);
  const url = backendUrl(values, io);
  parseBackendTarget(url, io.cwd);
  let backend: Backend;
  try {
    // Inspecting never creates or migrates a store: a missing one is a NotFoundError (exit code 1).
    backend = await openBackend(url, { cwd: io.cwd, migrate: false });
  } catch (error) {
    if (isNotFound(error) && !('packageName' in error))
      throw new NotFoundError(
        'store',
        `${error.message} (schedules commands never create a store; duetime run creates it)`,
        { cause: error },
      );
    throw error;
  }
  try {
    return await sub.run({ backend, values, positionals, io });
  } finally {
    await backend.close();
  }
}
