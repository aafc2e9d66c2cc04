/**
 * Two replicas of a service run one calendar on a shared SQLite file. The first leads; after a few
 * seconds it is killed (SIGKILL: no goodbye, its leases simply stop being renewed); the other takes over
 * within `leadershipTTL + pollInterval`, catches up the ticks nobody ran, and carries on.
 *
 *   pnpm --filter @duetime/example-calendar start
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { TICK_LOG, type TickRun } from './declarations.js';

export interface DemoOptions {
  /** The SQLite file (default `./calendar-example.db`, recreated on every run). */
  file?: string;
  /** How long the first leader runs before it is killed, in ms (default 5,000). */
  before?: number;
  /** How long the survivor runs after taking over, in ms (default 6,000). */
  after?: number;
  print?: (line: string) => void;
}

export interface DemoOutcome {
  /** From the SIGKILL to the survivor's leadership, in ms. */
  takeoverMs: number;
  /** Durable tick runs, in order of their instants. */
  ticks: TickRun[];
  /** Tick instants between the first and the last that no replica ran (none expected). */
  gaps: number[];
  /** Occurrence ids recorded more than once (none expected). */
  duplicates: string[];
  /** Occurrences skipped because the previous report was still running. */
  overlapBusy: number;
}

interface Replica {
  name: string;
  child: ChildProcess;
  lines: string[];
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<string>;
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));
const hhmmss = (ms: number) => new Date(ms).toISOString().slice(11, 19);

function startReplica(file: string, name: string, print: (line: string) => void, started: number): Replica {
  const require = createRequire(import.meta.url);
  const child = spawn(
    process.execPath,
    [
      '--import',
      pathToFileURL(require.resolve('tsx')).href,
      '--conditions=source',
      fileURLToPath(new URL('./replica.ts', import.meta.url)),
      file,
      name,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines: string[] = [];
  const waiters: { pattern: RegExp; done: (line: string) => void }[] = [];
  let buffer = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 1);
      lines.push(line);
      narrate(name, line, print, started);
      for (const w of [...waiters])
        if (w.pattern.test(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.done(line);
        }
    }
  });
  return {
    name,
    child,
    lines,
    waitFor(pattern, timeoutMs = 30_000) {
      const seen = lines.find((l) => pattern.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((done, fail) => {
        const timer = setTimeout(
          () => fail(new Error(`replica ${name} printed no ${pattern} in ${timeoutMs} ms`)),
          timeoutMs,
        );
        waiters.push({
          pattern,
          done: (line) => {
            clearTimeout(timer);
            done(line);
          },
        });
      });
    },
  };
}

/** Turns a replica's marker line into a line of the timeline. */
function narrate(name: string, line: string, print: (line: string) => void, started: number): void {
  const at = `+${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s  ${name.padEnd(9)}`;
  const [kind, a, b, c, d] = line.split(' ');
  if (kind === 'LEADER') print(`${at} leads the group (fencing token ${a})`);
  else if (kind === 'TICK') {
    const note =
      b === 'catch_up'
        ? '  <- caught up after the failover'
        : c === 'already-recorded'
          ? ' (already recorded)'
          : '';
    print(`${at} tick ${hhmmss(Number(a))} (epoch ${d})${note}`);
  } else if (kind === 'REPORT_START') print(`${at} report ${hhmmss(Number(a))} starts (takes 4 s)`);
  else if (kind === 'REPORT_END') print(`${at} report ${hhmmss(Number(a))} done${b ? ` (${b})` : ''}`);
  else if (kind === 'SKIPPED') print(`${at} ${a} ${hhmmss(Number(c))} skipped: ${b}`);
}

/** Runs the demo and reads the durable tick log back. */
export async function main(options: DemoOptions = {}): Promise<DemoOutcome> {
  const file = resolve(options.file ?? 'calendar-example.db');
  const print = options.print ?? ((line: string) => console.log(line));
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
  const started = Date.now();
  print(`two replicas on ${file}`);
  const first = startReplica(file, 'replica-a', print, started);
  let second: Replica | undefined;
  try {
    await first.waitFor(/^LEADER /);
    second = startReplica(file, 'replica-b', print, started);
    await second.waitFor(/^READY$/);
    await sleep(options.before ?? 5000);
    first.child.kill('SIGKILL');
    const killedAt = Date.now();
    print(`+${((killedAt - started) / 1000).toFixed(1).padStart(5)}s  replica-a SIGKILLed while leading`);
    await second.waitFor(/^LEADER /);
    const takeoverMs = Date.now() - killedAt;
    await sleep(options.after ?? 6000);
    second.child.kill('SIGTERM');
    await new Promise((done) => second?.child.once('exit', done));

    const backend = await createSqliteBackend({ filename: file });
    const ticks = (await backend.store.loadEvents(TICK_LOG))
      .map((e) => e.data as TickRun)
      .sort((x, y) => x.at - y.at);
    await backend.close();
    const counts = new Map<string, number>();
    for (const t of ticks) counts.set(t.occurrence, (counts.get(t.occurrence) ?? 0) + 1);
    const duplicates = [...counts].filter(([, n]) => n > 1).map(([id]) => id);
    const gaps: number[] = [];
    for (let i = 1; i < ticks.length; i++)
      for (let at = (ticks[i - 1] as TickRun).at + 1000; at < (ticks[i] as TickRun).at; at += 1000)
        gaps.push(at);
    const overlapBusy = [...first.lines, ...second.lines].filter((l) =>
      l.startsWith('SKIPPED report overlap_busy'),
    ).length;
    const by = (name: string) => ticks.filter((t) => t.replica === name).length;
    print('');
    print(`takeover: ${takeoverMs} ms after the SIGKILL (leadershipTTL 2,000 ms + pollInterval 250 ms)`);
    const epochs = (name: string) => [
      ...new Set(ticks.filter((t) => t.replica === name).map((t) => t.epoch)),
    ];
    print(`epochs that wrote ticks: replica-a ${epochs('replica-a')}, replica-b ${epochs('replica-b')}`);
    print(
      `ticks recorded: ${ticks.length} (replica-a ${by('replica-a')}, replica-b ${by('replica-b')}), ` +
        `caught up: ${ticks.filter((t) => t.origin === 'catch_up').length}, missing: ${gaps.length}, twice: ${duplicates.length}`,
    );
    print(`reports skipped because the previous one was still running: ${overlapBusy}`);
    return { takeoverMs, ticks, gaps, duplicates, overlapBusy };
  } finally {
    for (const r of [first, second])
      if (r && r.child.exitCode === null && r.child.signalCode === null) r.child.kill('SIGKILL');
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
