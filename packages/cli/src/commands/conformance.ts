import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { InvalidArgumentError } from '@duetime/core';
import { type CliIo, EXIT, table, UsageError } from '../io.js';
import { loadOptional } from '../optional.js';

export const conformanceHelp = `Usage:
  duetime conformance <adapter-module> [--name <name>] [--only <group,group>] [--json]

Runs the duetime conformance suite against an adapter module and prints a pass/fail table per group.
Needs @duetime/conformance and vitest installed next to the CLI. The module (JavaScript or TypeScript)
exports:
  open(namespace: string): Promise<Backend>   same namespace = same data, a new one = empty data
  drop?(namespace: string): Promise<void>      deletes a namespace's data; called after each test, so the
                                               run leaves no schema, table, key or stream behind
  capabilities?: ConformanceCapabilities       weaker guarantees it declares (e.g. { multiProcess: false },
                                               { dueOrder: false }, { pushChannel: false })
  sql?: SqlProbe                               for backends that declare sql: setup, write, rows and exec
                                               (a raw statement through tx.sql), see @duetime/conformance
Groups: schedules, sharing, dispatcher, batches, deadLetters, recurring, operations, reads,
  pushChannel, transactionControl, processes, crashes, leases, cursors, calendar, calendarFailover.
  --name <name>    name shown in the report (default: the module's file name)
  --only <groups>  run only these groups (comma separated)
  --json           print the per-group results as JSON`;

interface GroupResult {
  group: string;
  passed: number;
  failed: number;
  failures: string[];
}

const fromSource = import.meta.url.endsWith('.ts');

/** Where the suite the generated test file imports lives: the project's copy first, else the CLI's. */
function suiteLocation(cwd: string): string {
  try {
    return pathToFileURL(createRequire(join(cwd, 'package.json')).resolve('@duetime/conformance')).href;
  } catch {
    return import.meta.resolve('@duetime/conformance');
  }
}

/** `duetime conformance <module>` */
export async function conformanceCommand(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      only: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  });
  const specifier = positionals[0];
  if (!specifier) throw new UsageError('conformance needs an <adapter-module>', 'conformance');
  const modulePath = specifier.startsWith('file:')
    ? fileURLToPath(specifier)
    : isAbsolute(specifier)
      ? specifier
      : resolve(io.cwd, specifier);
  const moduleUrl = pathToFileURL(modulePath).href;
  const name =
    values.name ??
    modulePath
      .split(/[\\/]/)
      .pop()
      ?.replace(/\.[cm]?[jt]s$/, '') ??
    'adapter';
  const only = values.only
    ?.split(',')
    .map((g) => g.trim())
    .filter(Boolean);
  if (only && only.length === 0) throw new InvalidArgumentError('--only', values.only, 'names no group');
  // Only the names: the suite itself loads vitest, which works inside a vitest run only.
  const { CONFORMANCE_GROUPS: groups } = await loadOptional<typeof import('@duetime/conformance/groups')>(
    '@duetime/conformance/groups',
    'duetime conformance',
    io.cwd,
  );
  const unknown = only?.filter((group) => !(groups as readonly string[]).includes(group)) ?? [];
  if (unknown.length > 0)
    throw new InvalidArgumentError(
      '--only',
      values.only,
      `names the unknown group${unknown.length === 1 ? '' : 's'} ${unknown.map((g) => JSON.stringify(g)).join(', ')}; the groups are ${groups.join(', ')}`,
    );
  const { startVitest } = await loadOptional<typeof import('vitest/node')>(
    'vitest/node',
    'duetime conformance (it runs the suite with vitest)',
  );
  const dir = await mkdtemp(join(tmpdir(), 'duetime-conformance-'));
  const file = join(dir, 'conformance.test.ts');
  const suiteUrl = suiteLocation(io.cwd);
  await writeFile(
    file,
    [
      "import { writeFileSync } from 'node:fs';",
      `import { runConformance } from ${JSON.stringify(suiteUrl)};`,
      `import * as adapter from ${JSON.stringify(moduleUrl)};`,
      `if (typeof adapter.open !== 'function') throw new Error(${JSON.stringify(`${specifier} does not export open(namespace)`)});`,
      // Tells the command whether the adapter can delete what the suite creates.
      `writeFileSync(${JSON.stringify(join(dir, 'drops'))}, String(typeof adapter.drop === 'function'));`,
      'runConformance({',
      `  name: ${JSON.stringify(name)},`,
      '  open: adapter.open,',
      `  module: ${JSON.stringify(moduleUrl)},`,
      '  ...(adapter.capabilities ? { capabilities: adapter.capabilities } : {}),',
      "  ...(typeof adapter.drop === 'function' ? { drop: adapter.drop } : {}),",
      '  ...(adapter.sql ? { sql: adapter.sql } : {}),',
      ...(only ? [`  only: ${JSON.stringify(only)},`] : []),
      '});',
      '',
    ].join('\n'),
  );

  const results = new Map<string, GroupResult>();
  let done = 0;
  let drops = true;
  try {
    const conditions = fromSource ? ['source', 'node', 'default'] : ['node', 'default'];
    const vitest = await startVitest(
      'test',
      [file],
      {
        root: dir,
        watch: false,
        include: ['conformance.test.ts'],
        reporters: [
          {
            onTestCaseResult(testCase) {
              const path = testCase.fullName.split(' > ');
              const group = path.length > 2 ? (path[1] ?? 'setup') : 'setup';
              const entry = results.get(group) ?? { group, passed: 0, failed: 0, failures: [] };
              const state = testCase.result().state;
              if (state === 'passed') entry.passed++;
              else if (state === 'failed') {
                entry.failed++;
                entry.failures.push(
                  `${testCase.name}: ${testCase.result().errors?.[0]?.message?.split('\n')[0] ?? 'failed'}`,
                );
              }
              results.set(group, entry);
              done++;
              if (!values.json) io.err(`${state === 'passed' ? 'ok  ' : 'FAIL'} ${group} › ${testCase.name}`);
            },
          },
        ],
        testTimeout: 120_000,
        hookTimeout: 60_000,
      },
      {
        resolve: { conditions },
        ssr: { resolve: { conditions, externalConditions: fromSource ? ['source'] : [] } },
        server: { fs: { strict: false } },
      },
    );
    await vitest.close();
    const failedFiles = vitest.state
      .getFiles()
      .filter((f) => f.result?.state === 'fail' && !f.tasks.some((t) => t.result));
    if (failedFiles.length > 0) {
      const reason = failedFiles[0]?.result?.errors?.[0]?.message ?? 'the suite could not be loaded';
      throw new InvalidArgumentError('adapter-module', specifier, reason.split('\n')[0] ?? reason);
    }
    drops = await readFile(join(dir, 'drops'), 'utf8').then(
      (text) => text === 'true',
      () => true,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }

  const rows = [...results.values()];
  const failed = rows.reduce((n, r) => n + r.failed, 0);
  const passed = rows.reduce((n, r) => n + r.passed, 0);
  if (values.json) io.out(JSON.stringify({ name, passed, failed, groups: rows }, null, 2));
  else {
    io.out(
      table(
        ['GROUP', 'PASSED', 'FAILED', 'RESULT'],
        rows.map((r) => [r.group, String(r.passed), String(r.failed), r.failed ? 'FAIL' : 'pass']),
      ),
    );
    for (const r of rows) for (const f of r.failures) io.out(`  ✗ ${r.group}: ${f}`);
    io.out(`${name}: ${passed} passed, ${failed} failed (${done} tests)`);
  }
  if (!drops)
    io.err(
      `note: ${specifier} exports no drop(namespace), so the data the suite created (a namespace per test) was left in place; export drop to have each test's data deleted`,
    );
  return failed > 0 || passed === 0 ? EXIT.failed : EXIT.ok;
}
