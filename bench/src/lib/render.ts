import { ahead, behind, type Row } from './report.js';
import { fmtRatio, fmtSummary } from './stats.js';

function digitsFor(row: Row): number {
  // Ratios (the scaleout workload's N processes ÷ 1) read like the duetime ÷ peer column: two decimals.
  if (row.unit === '×') return 2;
  // Ratios of two figures of duetime's own (join ÷ by hand, duetime ÷ a primitive): three decimals, also
  // at or above 1 (1.004 must not print as 1.0 beside 0.961).
  if (row.unit === 'ratio') return 3;
  const magnitude = Math.abs(row.summary.median);
  if (row.summary.samples.every((v) => !Number.isFinite(v) || Number.isInteger(v))) return 0;
  if (row.unit === 'items/s' || row.unit === 'B' || row.unit === 'ns') return 0;
  if (Number.isFinite(magnitude) && magnitude < 1) return 3;
  if (Number.isFinite(magnitude) && magnitude < 100) return 1;
  return 0;
}

/** Markdown tables, one per metric: subject, median (min–max), and duetime ÷ peer ratios. */
export function renderTables(rows: Row[]): string {
  const byMetric = new Map<string, Row[]>();
  for (const row of rows) byMetric.set(row.metric, [...(byMetric.get(row.metric) ?? []), row]);
  const out: string[] = [];
  for (const [metric, group] of byMetric) {
    const first = group[0]!;
    out.push(`**${metric}** (${first.unit}, ${first.better} is better)\n`);
    out.push('| subject | median (min–max) | duetime ÷ peer, per round |');
    out.push('| --- | --- | --- |');
    for (const row of group) {
      const ratios = (row.ratios ?? [])
        .map(
          (r) =>
            `vs ${r.versus}: **${fmtRatio(r.median)}×** ${Number.isNaN(r.median) ? '(a side failed)' : ahead(row, r.median) ? '✓' : '✗ behind'} (${r.perRound.map(fmtRatio).join(', ')})`,
        )
        .join('<br>');
      const subject = row.note ? `${row.subject} (${row.note})` : row.subject;
      out.push(`| ${subject} | ${fmtSummary(row.summary, digitsFor(row))} | ${ratios} |`);
    }
    out.push('');
  }
  return out.join('\n');
}

/** A list of the rows where duetime is behind a peer (or the ratio could not be computed). */
export function renderBehind(rows: Row[]): string {
  if (rows.length === 0) return 'No results yet.';
  const list = behind(rows);
  if (list.length === 0) return 'duetime is ahead of every peer on every row of this run.';
  return list
    .map(
      ({ row, versus, ratio }) =>
        `- ${row.workload}: ${row.metric}: ${row.subject} vs ${versus}, ${Number.isNaN(ratio) ? 'not comparable (a side failed)' : `${fmtRatio(ratio)}×`}`,
    )
    .join('\n');
}
