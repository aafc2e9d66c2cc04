import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { renderBehind, renderTables } from './render.js';
import type { Row } from './report.js';

/** What main.ts writes to results/<workload>.json. */
export interface ResultFile {
  workload: string;
  quick: boolean;
  rounds: number;
  date: string;
  machine: { cpus: number; cpuModel: string; memoryGb: number; node: string };
  loadAverage?: number[];
  seconds: number;
  rows: Row[];
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
    everyRow.push(...data.rows);
    const { machine } = data;
    const load = data.loadAverage ? `, load average ${data.loadAverage.join(' → ')}` : '';
    sections.push(
      `### ${name}\n\n_${data.date.slice(0, 10)}, ${data.rounds} round${data.rounds > 1 ? 's' : ''}, ${data.seconds} s, ${machine.cpus} × ${machine.cpuModel}, ${machine.memoryGb} GB, Node ${machine.node}${load}_\n\n${renderTables(data.rows)}`,
    );
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
