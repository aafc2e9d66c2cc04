import { parseArgs } from 'node:util';
import {
  consoleLogger,
  Dispatcher,
  type DispatcherOptions,
  InvalidArgumentError,
  isRegistry,
  type Processor,
  type Registry,
  redactUrl,
  type ScheduleRecord,
  Scheduler,
  type SchedulerConfig,
} from '@duetime/core';
import { DateTime } from 'luxon';
import { type CliIo, EXIT, table, UsageError } from '../io.js';
import { openBackend } from '../open-backend.js';
import { backendOptions, backendUrl, importUserModule } from './common.js';

export const describeHelp = `Usage:
  duetime describe <module> [-n 3] [--json]

Loads a module that exports a Registry (as \`registry\` or the default export) and prints each
declaration with its next occurrences, in its zone and in UTC.
  -n <count>   occurrences per declaration (default 3)
  --json       print JSON`;

export const runHelp = `Usage:
  duetime run <module> [--backend <url>] [--group <g>] [--environment <env>]

Runs the module's Registry with a Scheduler (one leader per group across replicas), and a Dispatcher
when the module also exports \`processor\`, until SIGINT or SIGTERM; then drains within the drain timeout.
Logs each occurrence. The module may also export \`schedulerConfig\` and \`dispatcherOptions\` (partial
configurations merged under the command's options).
  --backend <url>       sqlite:./duetime.db (default), postgres://…, redis://…, nats://… (or DUETIME_BACKEND);
                        creates or migrates the store there when needed
  --group <g>           the leadership group (default: the module's, else "default")
  --environment <env>   this deployment's environment (default: the module's, else "production")`;

interface RegistryModule {
  registry: Registry;
  processor?: Processor;
  schedulerConfig?: Partial<SchedulerConfig>;
  dispatcherOptions?: Partial<DispatcherOptions>;
}

async function loadRegistryModule(
  specifier: string | undefined,
  command: string,
  io: CliIo,
): Promise<RegistryModule> {
  if (specifier === undefined)
    throw new UsageError(`${command} needs a <module> exporting a Registry`, command);
  const mod = await importUserModule(specifier, io);
  const registry = mod.registry ?? mod.default;
  // Not `instanceof`: the module may use another copy of @duetime/core than this CLI (a global install).
  if (!isRegistry(registry)) {
    throw new InvalidArgumentError(
      'module',
      specifier,
      'exports no Registry as `registry` or as the default export',
    );
  }
  if (mod.processor !== undefined && typeof mod.processor !== 'function') {
    throw new InvalidArgumentError(
      'module.processor',
      mod.processor,
      'must be a function (tx, message) => Promise<void>',
    );
  }
  return {
    registry,
    ...(mod.processor ? { processor: mod.processor as Processor } : {}),
    ...(mod.schedulerConfig ? { schedulerConfig: mod.schedulerConfig as Partial<SchedulerConfig> } : {}),
    ...(mod.dispatcherOptions
      ? { dispatcherOptions: mod.dispatcherOptions as Partial<DispatcherOptions> }
      : {}),
  };
}

/** `duetime describe <module>` */
export async function describeCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { n: { type: 'string', short: 'n' }, json: { type: 'boolean', default: false } },
  });
  const count = values.n === undefined ? 3 : Number(values.n);
  if (!Number.isInteger(count) || count < 0 || count > 100)
    throw new InvalidArgumentError('-n', values.n, 'must be an integer from 0 to 100');
  const { registry } = await loadRegistryModule(positionals[0], 'describe', io);
  const now = new Date();
  const described = [...registry].map((declaration) => {
    const next: string[] = [];
    let cursor = now;
    for (let i = 0; i < count; i++) {
      const at = declaration.spec.next(cursor);
      if (!at) break;
      next.push(at.toISOString());
      cursor = at;
    }
    return { ...declaration.describe(), next };
  });
  if (values.json) {
    io.out(JSON.stringify(described, null, 2));
    return EXIT.ok;
  }
  const rows: string[][] = [];
  for (const [i, declaration] of [...registry].entries()) {
    const zone = declaration.spec.timeZone;
    const options = describeSetOptions(described[i]!.options) || '—';
    const next = described[i]!.next.map(
      (iso) => `${DateTime.fromISO(iso, { zone }).toFormat('yyyy-MM-dd HH:mm:ss')}  ${iso}`,
    );
    if (next.length === 0) next.push('(none)');
    for (const [j, line] of next.entries()) {
      rows.push(
        j === 0
          ? [declaration.id, `${declaration.spec.toString()} · ${zone}`, options, line]
          : ['', '', '', line],
      );
    }
  }
  io.out(table(['ID', 'WHEN', 'OPTIONS', 'NEXT (local, UTC)'], rows));
  io.out(`${registry.size} declaration${registry.size === 1 ? '' : 's'}`);
  return EXIT.ok;
}

/**
 * The options a declaration sets, as `withoutOverlap, timeout=5000`. Defaults are not listed (a registry
 * made by an older core may still describe `withoutOverlap: false`: that is left out too).
 */
export function describeSetOptions(options: Record<string, unknown>): string {
  return Object.entries(options)
    .filter(([, value]) => value !== undefined && value !== false && value !== null)
    .map(([name, value]) =>
      typeof value === 'number' || typeof value === 'string' ? `${name}=${value}` : name,
    )
    .join(', ');
}

function recordLine(record: ScheduleRecord): string {
  const reason = record.reason ? ` (${record.reason}${record.detail ? `: ${record.detail}` : ''})` : '';
  return `${record.schedule} ${record.intendedAt.toISOString()} ${record.state}${reason} [${record.origin}] ${record.occurrence}`;
}

/** `duetime run <module>` */
export async function runCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { ...backendOptions, group: { type: 'string' }, environment: { type: 'string' } },
  });
  const mod = await loadRegistryModule(positionals[0], 'run', io);
  const url = backendUrl(values, io);
  const logger = consoleLogger({ prefix: 'duetime' });
  const backend = await openBackend(url, { cwd: io.cwd, logger });
  const controller = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    io.err(`duetime run: ${signal}, draining…`);
    controller.abort();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let failures = 0;
  try {
    const scheduler = new Scheduler({
      ...mod.schedulerConfig,
      registry: mod.registry,
      backend,
      logger,
      ...(values.group !== undefined ? { group: values.group } : {}),
      ...(values.environment !== undefined ? { environment: values.environment } : {}),
      onRecord: (record: ScheduleRecord) => {
        if (record.state === 'failed') failures++;
        io.out(recordLine(record));
      },
    });
    const dispatcher = mod.processor
      ? new Dispatcher({ ...mod.dispatcherOptions, store: backend.store, processor: mod.processor, logger })
      : undefined;
    io.err(
      `duetime run: ${mod.registry.size} declarations on ${redactUrl(url)}${dispatcher ? ', with a dispatcher' : ''}; SIGINT or SIGTERM to stop`,
    );
    await Promise.all([scheduler.run(controller.signal), dispatcher?.run(controller.signal)]);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await backend.close();
  }
  io.err(
    `duetime run: stopped${failures ? ` (${failures} failed occurrence${failures === 1 ? '' : 's'})` : ''}`,
  );
  return controller.signal.aborted ? EXIT.ok : EXIT.failed;
}
