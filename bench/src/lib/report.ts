import type { Subject } from '../subjects/types.js';
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
  /** duetime ÷ peer, per round, for each peer on the same server. */
  ratios?: { versus: string; perRound: number[]; median: number }[];
}

/** Builds rows for a metric, adding duetime ÷ peer ratios per round for peers on the same server. */
export function rowsFor(
  workload: string,
  metric: string,
  unit: string,
  better: 'higher' | 'lower',
  subjects: Subject[],
  samples: Map<string, number[]>,
): Row[] {
  const rows: Row[] = [];
  for (const subject of subjects) {
    const values = samples.get(subject.name) ?? [];
    const row: Row = { workload, metric, unit, better, subject: subject.name, summary: summarize(values) };
    if (subject.library === 'duetime') {
      const peers = subjects.filter((p) => p.library !== 'duetime' && p.backend === subject.backend);
      if (peers.length > 0) {
        row.ratios = peers.map((peer) => {
          const theirs = samples.get(peer.name) ?? [];
          const perRound = values.map((v, i) => v / (theirs[i] ?? Number.NaN));
          return { versus: peer.name, perRound, median: summarize(perRound).median };
        });
      }
    }
    rows.push(row);
  }
  return rows;
}

/** Whether duetime is ahead of the peer by a row's median ratio. */
export function ahead(row: Row, ratio: number): boolean {
  return row.better === 'higher' ? ratio >= 1 : ratio <= 1;
}
