import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Row } from '../lib/report.js';
import { type BenchContext, spawnTs } from '../lib/run.js';
import { summarize } from '../lib/stats.js';

interface CronResult {
  case: string;
  expression: string;
  zone: string;
  library: string;
  roundsNsPerCall: number[];
}

/**
 * 6. cron: ns per `next()` for a simple and a DST-crossing expression, duetime vs croner and cron-parser.
 * Runs src/cron-next.ts (round-robin rounds, CPU time per call) in a process of its own.
 */
export async function cronWorkload(ctx: BenchContext): Promise<Row[]> {
  const rounds = ctx.quick ? 5 : 15;
  const script = fileURLToPath(new URL('../cron-next.ts', import.meta.url));
  const out = fileURLToPath(
    new URL(`../../results/cron-next${ctx.quick ? '.quick' : ''}.json`, import.meta.url),
  );
  await new Promise<void>((resolve, reject) => {
    const child = spawnTs(script, ['--rounds', String(rounds), '--out', out], { stdout: 'inherit' });
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`cron-next exited with ${code}`)),
    );
  });
  const data = JSON.parse(readFileSync(out, 'utf8')) as { results: CronResult[] };
  const rows: Row[] = [];
  for (const name of [...new Set(data.results.map((r) => r.case))]) {
    const group = data.results.filter((r) => r.case === name);
    const own = group.find((r) => r.library === 'duetime')!;
    const metric = `next(): \`${own.expression}\` in ${own.zone}`;
    for (const r of group) {
      const row: Row = {
        workload: 'cron',
        metric,
        unit: 'ns',
        better: 'lower',
        subject: r.library,
        summary: summarize(r.roundsNsPerCall),
      };
      if (r.library === 'duetime') {
        row.ratios = group
          .filter((p) => p.library !== 'duetime')
          .map((peer) => {
            const perRound = own.roundsNsPerCall.map((v, i) => v / (peer.roundsNsPerCall[i] ?? Number.NaN));
            return { versus: peer.library, perRound, median: summarize(perRound).median };
          });
      }
      rows.push(row);
    }
  }
  return rows;
}
