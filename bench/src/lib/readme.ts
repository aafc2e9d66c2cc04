import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { renderBehind, renderTables } from './render.js';
import type { Row } from './report.js';
import { isSubjectOf } from './versions.js';

/** What main.ts writes to results/<workload>.json. */
export interface ResultFile {
  workload: string;
  quick: boolean;
  rounds: number;
  date: string;
  machine: { cpus: number; cpuModel: string; memoryGb: number; node: string };
  loadAverage?: number[];
  /** Installed version of each peer package with rows in this file (absent in files written before). */
  peers?: Record<string, string>;
  seconds: number;
  rows: Row[];
}

/**
 * The queue peers of files that do not record their versions: measured before the upgrade to the current
 * releases, each in one row with the settings of that time. Their rows are relabelled `name@version`, so
 * they are not read as the current subjects of the same name (`pg-boss` is now pg-boss 12 at its defaults).
 */
const UNRECORDED_PEERS: Record<string, string> = {
  bullmq: '5.81.5',
  'pg-boss': '10.4.2',
  'graphile-worker': '0.16.6',
};

/** `rows` with the subjects of unrecorded peers (and the ratios against them) relabelled `name@version`. */
function relabelUnrecorded(rows: Row[]): { rows: Row[]; peers: string[] } {
  const label = (subject: string) => {
    const pkg = Object.keys(UNRECORDED_PEERS).find((p) => isSubjectOf(subject, p));
    return pkg ? subject.replace(pkg, `${pkg}@${UNRECORDED_PEERS[pkg]}`) : subject;
  };
  const peers = Object.keys(UNRECORDED_PEERS).filter((pkg) => rows.some((r) => isSubjectOf(r.subject, pkg)));
  const relabelled = rows.map((row) => ({
    ...row,
    subject: label(row.subject),
    ...(row.ratios ? { ratios: row.ratios.map((r) => ({ ...r, versus: label(r.versus) })) } : {}),
  }));
  return { rows: relabelled, peers: peers.map((pkg) => `${pkg}@${UNRECORDED_PEERS[pkg]}`) };
}

/** The line under a workload's heading: when, how long, where, and which peer releases. */
function runLine(data: ResultFile, unrecorded: string[]): string {
  const { machine } = data;
  const load = data.loadAverage ? `, load average ${data.loadAverage.join(' → ')}` : '';
  const recorded = Object.entries(data.peers ?? {}).map(([pkg, version]) => `${pkg} ${version}`);
  const peers = recorded.length > 0 ? `; peers: ${recorded.join(', ')}` : '';
  const line = `_${data.date.slice(0, 10)}, ${data.rounds} round${data.rounds > 1 ? 's' : ''}, ${data.seconds} s, ${machine.cpus} × ${machine.cpuModel}, ${machine.memoryGb} GB, Node ${machine.node}${load}${peers}_`;
  if (unrecorded.length === 0) return line;
  return `${line}\n\n_Measured before the peers' upgrade: ${unrecorded.join(', ')}, each with the one set of settings of that time; \`pnpm bench --only ${data.workload}\` measures the current releases at their defaults and at their best._`;
}

const START = '<!-- results:start -->';
const END = '<!-- results:end -->';

/** The generated results: one section per workload (or how to measure it), then the rows behind. */
export function resultsSection(workloads: string[], read: (name: string) => ResultFile | undefined): string {
  const sections: string[] = [];
  const everyRow: Row[] = [];
  for (const name of workloads) {
    const data = read(name);
    if (!data) {
      sections.push(`### ${name}\n\nNot measured yet: run \`pnpm bench --only ${name}\`.`);
      continue;
    }
    const { rows, peers: unrecorded } = data.peers
      ? { rows: data.rows, peers: [] }
      : relabelUnrecorded(data.rows);
    everyRow.push(...rows);
    sections.push(`### ${name}\n\n${runLine(data, unrecorded)}\n\n${renderTables(rows)}`);
  }
  sections.push(`### Rows where duetime is behind in these results\n\n${renderBehind(everyRow)}`);
  return sections.join('\n\n');
}

/**
 * Replaces what lies between the results markers of the README at `url`, then formats the file with the
 * repository's formatter (so `pnpm lint` passes on generated tables); false if it has no markers.
 */
export function refreshReadme(url: URL, section: string): boolean {
  const readme = readFileSync(url, 'utf8');
  if (!readme.includes(START) || !readme.includes(END)) return false;
  const before = readme.slice(0, readme.indexOf(START) + START.length);
  const after = readme.slice(readme.indexOf(END));
  writeFileSync(url, `${before}\n\n${section}\n\n${after}`);
  const biome = createRequire(import.meta.url).resolve('@biomejs/biome/bin/biome');
  const formatted = spawnSync(process.execPath, [biome, 'format', '--write', fileURLToPath(url)], {
    encoding: 'utf8',
  });
  if (formatted.status !== 0) console.error(`could not format ${fileURLToPath(url)}: ${formatted.stderr}`);
  return true;
}

/** Reads results/<name><suffix>.json, or undefined when there is none. */
export function readResult(dir: URL, name: string, suffix = ''): ResultFile | undefined {
  try {
    return JSON.parse(readFileSync(new URL(`${name}${suffix}.json`, dir), 'utf8')) as ResultFile;
  } catch {
    return undefined;
  }
}
