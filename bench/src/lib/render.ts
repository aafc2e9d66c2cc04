import { ahead, type Row } from './report.js';
import { fmt, fmtSummary } from './stats.js';

/** Markdown tables, one per metric: subject, median (min–max), and duetime ÷ peer ratios. */
export function renderTables(rows: Row[]): string {
  const byMetric = new Map<string, Row[]>();
  for (const row of rows) byMetric.set(row.metric, [...(byMetric.get(row.metric) ?? []), row]);
  const out: string[] = [];
  for (const [metric, group] of byMetric) {
    const first = group[0]!;
    const digits =
      first.unit === 'ms' || first.unit === 's' || first.unit === 'MB' || first.unit === 'ns' ? 1 : 0;
    out.push(`**${metric}** (${first.unit}, ${first.better} is better)\n`);
    out.push('| subject | median (min–max) | duetime ÷ peer, per round |');
    out.push('| --- | --- | --- |');
    for (const row of group) {
      const ratios = (row.ratios ?? [])
        .map(
          (r) =>
            `vs ${r.versus}: **${fmt(r.median, 2)}×** ${ahead(row, r.median) ? '✓' : '✗ behind'} (${r.perRound.map((x) => fmt(x, 2)).join(', ')})`,
        )
        .join('<br>');
      out.push(`| ${row.subject} | ${fmtSummary(row.summary, digits)} | ${ratios} |`);
    }
    out.push('');
  }
  return out.join('\n');
}
