import { parseArgs } from 'node:util';
import {
  type Backend,
  InvalidArgumentError,
  type Schedule,
  scheduleKey,
  schedulePrefix,
} from '@duetime/core';
import { type CliIo, EXIT, table, UsageError } from '../io.js';
import { openBackend } from '../open-backend.js';
import { backendOptions, backendUrl, parseInstant } from './common.js';

export const schedulesHelp = `Usage:
  duetime schedules list [--through <iso>] [--prefix <p>] [--limit <n>] [--json]
  duetime schedules show <key> [--json]
  duetime schedules cancel <key>
  duetime schedules cancel --prefix <p> [--yes]

Inspect and cancel pending one-shot schedules.
  --through <iso>   only schedules due at or before this instant
  --prefix <p>      only keys starting with this literal prefix
  --limit <n>       at most n rows (default: all, read page by page)
  --yes, -y         cancel several schedules without asking
  --json            print data as JSON
  --backend <url>   sqlite:./duetime.db (default), postgres://…, redis://…, nats://… (or DUETIME_BACKEND)`;

/** `duetime schedules …` */
export async function schedulesCommand(args: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = args;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      through: { type: 'string' },
      prefix: { type: 'string' },
      limit: { type: 'string' },
      json: { type: 'boolean', default: false },
      yes: { type: 'boolean', short: 'y', default: false },
      ...backendOptions,
    },
  });
  if (sub === undefined)
    throw new UsageError('schedules needs a subcommand: list, show or cancel', 'schedules');
  const backend = await openBackend(backendUrl(values, io), { cwd: io.cwd });
  try {
    switch (sub) {
      case 'list':
        return await list(backend, values, io);
      case 'show':
        return await show(backend, positionals[0], values.json === true, io);
      case 'cancel':
        return await cancel(backend, positionals[0], values, io);
      default:
        throw new UsageError(`unknown subcommand schedules ${sub}; use list, show or cancel`, 'schedules');
    }
  } finally {
    await backend.close();
  }
}

function toJson(s: Schedule) {
  return {
    key: s.key,
    at: s.at.toISOString(),
    version: s.version,
    attempts: s.attempts,
    dueAt: s.dueAt.toISOString(),
    message: s.message,
  };
}

async function list(
  backend: Backend,
  values: { through?: string; prefix?: string; limit?: string; json?: boolean },
  io: CliIo,
): Promise<number> {
  const through = values.through === undefined ? undefined : parseInstant('--through', values.through);
  const prefix = values.prefix === undefined ? undefined : schedulePrefix(values.prefix, '--prefix');
  let limit = Number.POSITIVE_INFINITY;
  if (values.limit !== undefined) {
    limit = Number(values.limit);
    if (!Number.isInteger(limit) || limit < 1)
      throw new InvalidArgumentError('--limit', values.limit, 'must be a positive integer');
  }
  const rows: Schedule[] = [];
  for await (const s of backend.store.iterateSchedules({
    ...(through ? { through } : {}),
    ...(prefix !== undefined ? { prefix } : {}),
  })) {
    if (rows.length >= limit) break;
    rows.push(s);
  }
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
      ['KEY', 'AT (UTC)', 'VERSION', 'ATTEMPTS', 'TYPE', 'AGGREGATE'],
      rows.map((s) => [
        s.key,
        s.at.toISOString(),
        String(s.version),
        String(s.attempts),
        s.message.type,
        s.message.aggregateId,
      ]),
    ),
  );
  io.out(`${rows.length} schedule${rows.length === 1 ? '' : 's'}`);
  return EXIT.ok;
}

async function show(backend: Backend, key: string | undefined, json: boolean, io: CliIo): Promise<number> {
  if (key === undefined) throw new UsageError('schedules show needs a <key>', 'schedules');
  const s = await backend.store.loadSchedule(scheduleKey(key));
  if (!s) {
    io.err(`no pending schedule under ${JSON.stringify(key)}`);
    return EXIT.failed;
  }
  if (json) io.out(JSON.stringify(toJson(s), null, 2));
  else {
    io.out(
      [
        `key:       ${s.key}`,
        `at:        ${s.at.toISOString()}`,
        `due at:    ${s.dueAt.toISOString()}${s.attempts > 0 ? ` (after ${s.attempts} failed attempt${s.attempts === 1 ? '' : 's'})` : ''}`,
        `version:   ${s.version}`,
        `type:      ${s.message.type}`,
        `aggregate: ${s.message.aggregateId}`,
        `data:      ${JSON.stringify(s.message.data ?? null)}`,
      ].join('\n'),
    );
  }
  return EXIT.ok;
}

async function cancel(
  backend: Backend,
  key: string | undefined,
  values: { prefix?: string; yes?: boolean; json?: boolean },
  io: CliIo,
): Promise<number> {
  if (values.prefix !== undefined) {
    if (key !== undefined) throw new UsageError('give either a <key> or --prefix, not both', 'schedules');
    const prefix = schedulePrefix(values.prefix, '--prefix');
    let count = 0;
    for await (const _ of backend.store.iterateSchedules({ prefix })) {
      count++;
      if (io.isTTY && count % 10_000 === 0) io.err(`counting… ${count}`);
    }
    if (count === 0) {
      io.out(`no pending schedules under the prefix ${JSON.stringify(prefix)}`);
      return EXIT.ok;
    }
    if (count > 1 && !values.yes) {
      const ok = await io.confirm(`cancel ${count} schedules under the prefix ${JSON.stringify(prefix)}?`);
      if (!ok) {
        io.err(`not cancelled: ${count} schedules match; pass --yes to cancel without asking`);
        return EXIT.failed;
      }
    }
    if (io.isTTY) io.err(`cancelling ${count} schedules…`);
    const cancelled = await backend.store.transact((tx) => tx.cancelSchedulePrefix(prefix));
    io.out(
      values.json
        ? JSON.stringify({ cancelled })
        : `cancelled ${cancelled} schedule${cancelled === 1 ? '' : 's'}`,
    );
    return EXIT.ok;
  }
  if (key === undefined) throw new UsageError('schedules cancel needs a <key> or --prefix <p>', 'schedules');
  const k = scheduleKey(key);
  const cancelled = await backend.store.transact((tx) => tx.cancelSchedule(k));
  if (values.json) io.out(JSON.stringify({ cancelled: cancelled ? 1 : 0 }));
  else io.out(cancelled ? `cancelled ${k}` : `no pending schedule under ${JSON.stringify(k)}`);
  return cancelled ? EXIT.ok : EXIT.failed;
}
