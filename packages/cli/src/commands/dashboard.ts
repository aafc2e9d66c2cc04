import { parseArgs } from 'node:util';
import { InvalidArgumentError, redactUrl } from '@duetime/core';
import { type CliIo, EXIT, isNotFound } from '../io.js';
import { openBackend } from '../open-backend.js';
import { loadOptional, MissingPackageError } from '../optional.js';
import { backendOptions, backendUrl } from './common.js';

export const dashboardHelp = `Usage:
  duetime dashboard [--backend <url>] [--host 127.0.0.1] [--port 4600] [--token <t>] [--allow-actions]
                    [--group <g>]... [--namespace <ns>] [--environment <env>]

Serves a status page and its JSON API for the store at --backend: pending and due schedules (paged,
searchable by key prefix), dead letters with their errors, recurring schedules with their next
occurrences, each calendar group's leader and epoch (read from its lease), and the due backlog sampled
over the last 15 minutes. Runs until SIGINT or SIGTERM. Never creates, migrates or writes the store unless
--allow-actions is given; then the page can retry a dead letter, or cancel, pause, resume or trigger a
schedule, each after a confirmation, as a POST carrying a CSRF token.
  --backend <url>       sqlite:./duetime.db (default), postgres://…, redis://…, nats://… (or DUETIME_BACKEND)
  --host <address>      where to listen (default 127.0.0.1); any address that is not loopback needs a token
  --port <n>            default 4600; 0 picks a free port
  --token <t>           required as "Authorization: Bearer <t>" by the API (or DUETIME_DASHBOARD_TOKEN;
                        at least 16 characters); the page asks for it once per tab
  --allow-actions       enable retrying dead letters, and cancelling, pausing, resuming and triggering
                        schedules, from the page
  --group <g>           a calendar group to show (repeatable; default "default")
  --namespace <ns>      the groups' namespace (default "duetime")
  --environment <env>   the groups' environment (default "production")`;

/** `duetime dashboard` */
export async function dashboardCommand(args: string[], io: CliIo): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      ...backendOptions,
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '4600' },
      token: { type: 'string' },
      'allow-actions': { type: 'boolean', default: false },
      group: { type: 'string', multiple: true },
      namespace: { type: 'string' },
      environment: { type: 'string' },
    },
  });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new InvalidArgumentError('--port', values.port, 'must be an integer from 0 to 65535');
  const token = values.token ?? io.env.DUETIME_DASHBOARD_TOKEN;
  const { isLoopback, startDashboard } = await loadOptional<typeof import('@duetime/dashboard')>(
    '@duetime/dashboard',
    'the dashboard command',
    io.cwd,
  );
  if (!isLoopback(values.host) && token === undefined)
    throw new InvalidArgumentError(
      '--host',
      values.host,
      'is not a loopback address: binding it requires --token (or DUETIME_DASHBOARD_TOKEN)',
    );
  const url = backendUrl(values, io);
  const shown = redactUrl(url);
  const secrets = secretsOf(url);
  let backend: Awaited<ReturnType<typeof openBackend>>;
  try {
    backend = await openBackend(url, { cwd: io.cwd, migrate: false });
  } catch (error) {
    // A backend package that is not installed is not an empty store: it exits 5 and names the package.
    if (isNotFound(error) && !(error instanceof MissingPackageError)) {
      io.err(`duetime dashboard: nothing to show: ${error.message}`);
      return EXIT.failed;
    }
    throw error;
  }
  const controller = new AbortController();
  const stop = () => controller.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const dashboard = await startDashboard({
      backend,
      host: values.host,
      port,
      ...(token !== undefined ? { token } : {}),
      allowActions: values['allow-actions'],
      label: shown,
      secrets,
      groups: (values.group ?? ['default']).map((group) => ({
        group,
        ...(values.namespace !== undefined ? { namespace: values.namespace } : {}),
        ...(values.environment !== undefined ? { environment: values.environment } : {}),
      })),
    });
    io.out(`duetime dashboard: ${dashboard.url} (${shown})`);
    io.err(
      [
        values['allow-actions']
          ? 'actions enabled: the page can retry dead letters and cancel, pause, resume or trigger schedules (each confirmed)'
          : 'read-only: the store is never written (--allow-actions enables retry, cancel, pause, resume and trigger)',
        dashboard.tokenRequired
          ? `a token is required (Authorization: Bearer …; the page asks for it)${isLoopback(values.host) ? '' : `; listening on ${values.host}, reachable beyond this machine`}`
          : 'listening on loopback only, without a token',
        'SIGINT or SIGTERM to stop',
      ].join('\n'),
    );
    await new Promise<void>((resolve) =>
      controller.signal.addEventListener('abort', () => resolve(), { once: true }),
    );
    await dashboard.close();
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    await backend.close();
  }
  io.err('duetime dashboard: stopped');
  return EXIT.ok;
}

/** The password of a backend URL, so that it is never shown or logged even inside a driver's message. */
function secretsOf(url: string): string[] {
  try {
    const password = new URL(url.split(',')[0] ?? url).password;
    return password ? [password, decodeURIComponent(password)] : [];
  } catch {
    return [];
  }
}
