import { type Summary, summarize } from './stats.js';

/** One measured figure for one subject. */
export interface Row {
  workload: string;
  metric: string;
  unit: string;
  /** Which direction is better for this metric. */
  better: 'higher' | 'lower';
  subject: string;
  summary: Summary;
  /** duetime ÷ peer, per round, for each peer doing the same work. */
  ratios?: { versus: string; perRound: number[]; median: number }[];
  /** Printed with the subject: why a row is not measured, or measured on other terms than its metric says. */
  note?: string;
}

/** What rowsFor needs to know about a subject: its name, library and the server it shares with peers. */
export interface Compared {
  name: string;
  library: string;
  backend: string;
}

/** Builds rows for a metric, adding duetime ÷ peer ratios per round for peers on the same server. */
export function rowsFor(
  workload: string,
  metric: string,
  unit: string,
  better: 'higher' | 'lower',
  subjects: Compared[],
  samples: Map<string, number[]>,
): Row[] {
  const rows: Row[] = [];
  for (const subject of subjects) {
    if (!samples.has(subject.name)) continue;
    const values = samples.get(subject.name)!;
    const row: Row = { workload, metric, unit, better, subject: subject.name, summary: summarize(values) };
    if (subject.library === 'duetime') {
      const peers = subjects.filter(
        (p) => p.library !== 'duetime' && p.backend === subject.backend && samples.has(p.name),
      );
      if (peers.length > 0) {
        row.ratios = peers.map((peer) => {
          const theirs = samples.get(peer.name)!;
          const perRound = values.map((v, i) => ratio(v, theirs[i] ?? Number.NaN));
          return { versus: peer.name, perRound, median: summarize(perRound).median };
        });
      }
    }
    rows.push(row);
  }
  return rows;
}

/** duetime ÷ peer; 1 when both are 0 (a tie), Infinity when only the peer's is 0. */
export function ratio(own: number, theirs: number): number {
  return own === 0 && theirs === 0 ? 1 : own / theirs;
}

/** One row of duetime alone (no peer does this work). */
export function soloRow(
  workload: string,
  metric: string,
  unit: string,
  better: 'higher' | 'lower',
  subject: string,
  samples: number[],
  note?: string,
): Row {
  return { workload, metric, unit, better, subject, summary: summarize(samples), ...(note ? { note } : {}) };
}

/** Whether duetime is ahead of the peer by a row's median ratio. */
export function ahead(row: Row, ratio: number): boolean {
  return row.better === 'higher' ? ratio >= 1 : ratio <= 1;
}

/** Every (row, peer) pair where duetime's median ratio is behind, or not comparable (n/a). */
export function behind(rows: Row[]): { row: Row; versus: string; ratio: number }[] {
  const out: { row: Row; versus: string; ratio: number }[] = [];
  for (const row of rows)
    for (const r of row.ratios ?? [])
      if (Number.isNaN(r.median) || !ahead(row, r.median))
        out.push({ row, versus: r.versus, ratio: r.median });
  return out;
}
