import { parseArgs } from 'node:util';
import { InvalidArgumentError } from '@duetime/core';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { BACKEND_PACKAGES, parseBackendTarget } from '../open-backend.js';
import { loadOptional } from '../optional.js';
import { backendOptions, backendUrl } from './common.js';

export const migrateHelp = `Usage:
  duetime migrate --backend 'nats://host:4222?prefix=<prefix>' [--dry-run] [--keep-old] [--json]

Moves a NATS store of the earlier format (duetime 0.1: streams <prefix>_log and <prefix>_state) to the
current one (<prefix>_store), on a NATS server 2.12 or later: every pending schedule (keeping its version,
attempts and due time) and every event. Stop every process of the old version first; the old store must be
at rest (the command says what to do when it is not). Safe to run again after an interruption.
  --backend <url>  the NATS server(s) and the store's prefix (default prefix: duetime)
  --dry-run        only read the old store and print what would move
  --keep-old       keep the old streams afterwards (by default they are deleted once all is written)
  --json           print the report as JSON

Other backends need no migration command: SQLite and PostgreSQL migrate their schema when they open,
Redis reads what earlier versions wrote.`;

const options = {
  ...backendOptions,
  'dry-run': { type: 'boolean', default: false },
  'keep-old': { type: 'boolean', default: false },
  json: { type: 'boolean', default: false },
} as const;

export async function migrateCommand(args: string[], io: CliIo): Promise<number> {
  let values: { backend?: string; 'dry-run': boolean; 'keep-old': boolean; json: boolean };
  try {
    ({ values } = parseArgs({ args, options, allowPositionals: false, strict: true }));
  } catch (error) {
    throw new UsageError((error as Error).message, 'migrate');
  }
  const url = values.backend ?? io.env.DUETIME_BACKEND;
  if (url === undefined)
    throw new UsageError('migrate needs --backend nats://host:port?prefix=<prefix>', 'migrate');
  const target = parseBackendTarget(backendUrl({ backend: url }, io), io.cwd);
  if (target.kind !== 'nats')
    throw new InvalidArgumentError(
      '--backend',
      target.display,
      `is a ${target.kind} URL; only the NATS backend has a store format to migrate (the others migrate when they open)`,
    );
  const { migrateNatsStore } = await loadOptional<typeof import('@duetime/backend-nats')>(
    BACKEND_PACKAGES.nats,
    `the backend URL ${target.display}`,
    io.cwd,
  );
  const report = await migrateNatsStore(
    { servers: target.servers },
    {
      ...(target.prefix !== undefined ? { prefix: target.prefix } : {}),
      dryRun: values['dry-run'],
      keepOld: values['keep-old'],
    },
  );
  if (values.json) {
    io.out(JSON.stringify(report, null, 2));
    return EXIT.ok;
  }
  const what = `${report.schedules} pending schedule${report.schedules === 1 ? '' : 's'} and ${report.events} event${report.events === 1 ? '' : 's'} of ${report.aggregates} aggregate${report.aggregates === 1 ? '' : 's'}`;
  if (report.dryRun) io.out(`would move ${what} of prefix ${report.prefix} (nothing written)`);
  else {
    io.out(`moved ${what} of prefix ${report.prefix}; new versions start above ${report.versionBase}`);
    io.out(
      report.deleted.length > 0
        ? `deleted the old streams ${report.deleted.join(', ')}`
        : 'kept the old streams; delete them once nothing runs the old version',
    );
  }
  return EXIT.ok;
}
