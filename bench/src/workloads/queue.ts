import { type Row, rowsFor } from '../lib/report.js';
import { alternate, type BenchContext, until } from '../lib/run.js';
import { percentile } from '../lib/stats.js';
import type { Item, Subject } from '../subjects/types.js';

const HOUR = 3_600_000;

function items(count: number, dueAt: (i: number) => number): Item[] {
  const run = Math.random().toString(36).slice(2, 8);
  return Array.from({ length: count }, (_, i) => ({ id: `${run}-${i}`, dueAt: dueAt(i) }));
}

/** 1. enqueue: delayed items one at a time awaited, 16 in flight, and in batches of 100 → items/s. */
export async function enqueueWorkload(ctx: BenchContext, subjects: Subject[]): Promise<Row[]> {
  const count = ctx.quick ? 300 : 10_000;
  const modes = ['awaited', 'in flight 16', 'batches of 100'] as const;
  const rows: Row[] = [];
  for (const mode of modes) {
    const samples = await alternate(
      ctx,
      subjects,
      `enqueue ${mode}`,
      async (subject) => {
        const queue = await subject.create();
        try {
          const list = items(count, () => Date.now() + HOUR);
          const started = performance.now();
          if (mode === 'awaited') for (const item of list) await queue.enqueue(item);
          else if (mode === 'in flight 16') {
            let next = 0;
            await Promise.all(
              Array.from({ length: 16 }, async () => {
                while (next < list.length) await queue.enqueue(list[next++]!);
              }),
            );
          } else for (let i = 0; i < list.length; i += 100) await queue.enqueueBatch(list.slice(i, i + 100));
          return Math.round((count / (performance.now() - started)) * 1000);
        } finally {
          await queue.close();
        }
      },
      Number.NaN,
    );
    rows.push(
      ...rowsFor(
        'enqueue',
        `${count.toLocaleString('en-US')} delayed items, ${mode}`,
        'items/s',
        'higher',
        subjects,
        samples,
      ),
    );
  }
  return rows;
}

/** 2. drain: items already due, one worker at concurrency 1 and 16 → items/s until all are consumed. */
export async function drainWorkload(ctx: BenchContext, subjects: Subject[]): Promise<Row[]> {
  const count = ctx.quick ? 300 : 20_000;
  const rows: Row[] = [];
  for (const concurrency of [1, 16]) {
    const samples = await alternate(
      ctx,
      subjects,
      `drain c=${concurrency}`,
      async (subject) => {
        const queue = await subject.create();
        try {
          const list = items(count, (i) => Date.now() - 60_000 + i);
          for (let i = 0; i < list.length; i += 500) await queue.enqueueBatch(list.slice(i, i + 500));
          let done = 0;
          const started = performance.now();
          const stop = await queue.startWorker({ concurrency, onJob: () => void done++ });
          const finished = await until(() => done >= count, ctx.quick ? 60_000 : 600_000);
          const elapsed = performance.now() - started;
          await stop();
          if (!finished) throw new Error(`${subject.name} drained only ${done} of ${count}`);
          return Math.round((count / elapsed) * 1000);
        } finally {
          await queue.close();
        }
      },
      Number.NaN,
    );
    rows.push(
      ...rowsFor(
        'drain',
        `${count.toLocaleString('en-US')} due items, concurrency ${concurrency}`,
        'items/s',
        'higher',
        subjects,
        samples,
      ),
    );
  }
  return rows;
}

/**
 * 2b. telemetry: the drain workload (50,000 items) on duetime alone, with its telemetry variants (see
 * `telemetrySubjects()`): items/s as in `drain`, and the CPU time this process spent per item while
 * draining (the worker runs in this process), which a busy machine disturbs less than a rate. Each row's
 * note gives its figure against the first subject's (telemetry off, the baseline), as the median of the
 * per-round ratios. Rounds rotate the order of the subjects.
 */
export async function telemetryWorkload(ctx: BenchContext, subjects: Subject[]): Promise<Row[]> {
  const count = ctx.quick ? 300 : 50_000;
  const rows: Row[] = [];
  for (const concurrency of [1, 16]) {
    const samples = await alternate(
      ctx,
      subjects,
      `telemetry c=${concurrency}`,
      async (subject) => {
        const queue = await subject.create();
        try {
          const list = items(count, (i) => Date.now() - 60_000 + i);
          for (let i = 0; i < list.length; i += 500) await queue.enqueueBatch(list.slice(i, i + 500));
          let done = 0;
          const cpu = process.cpuUsage();
          const started = performance.now();
          const stop = await queue.startWorker({ concurrency, onJob: () => void done++ });
          const finished = await until(() => done >= count, ctx.quick ? 60_000 : 600_000);
          const elapsed = performance.now() - started;
          const used = process.cpuUsage(cpu);
          await stop();
          if (!finished) throw new Error(`${subject.name} drained only ${done} of ${count}`);
          return {
            rate: Math.round((count / elapsed) * 1000),
            cpu: Math.round(((used.user + used.system) / count) * 100) / 100,
          };
        } finally {
          await queue.close();
        }
      },
      { rate: Number.NaN, cpu: Number.NaN },
      { rotate: true },
    );
    const pick = (field: 'rate' | 'cpu') =>
      new Map([...samples].map(([name, values]) => [name, values.map((v) => v[field])]));
    const metric = `${count.toLocaleString('en-US')} due items, concurrency ${concurrency}`;
    const rates = rowsFor('telemetry', metric, 'items/s', 'higher', subjects, pick('rate'));
    const cpu = rowsFor('telemetry', `${metric}: CPU per item`, 'µs', 'lower', subjects, pick('cpu'));
    rows.push(
      ...noteAgainstBaseline(rates, subjects[0]?.name),
      ...noteAgainstBaseline(cpu, subjects[0]?.name),
    );
  }
  return rows;
}

/** Adds to each row a note with its value against the `baseline` subject's: the median per-round ratio. */
function noteAgainstBaseline(rows: Row[], baseline: string | undefined): Row[] {
  const base = rows.find((r) => r.subject === baseline);
  for (const row of rows) {
    if (!base || row === base) continue;
    const perRound = row.summary.samples.map((v, i) => v / (base.summary.samples[i] ?? Number.NaN));
    const sorted = perRound.filter((r) => Number.isFinite(r)).sort((a, b) => a - b);
    const median = sorted[Math.floor((sorted.length - 1) / 2)];
    if (median !== undefined)
      row.note = `${median >= 1 ? '+' : '−'}${Math.abs((median - 1) * 100).toFixed(1)} % vs telemetry off; per round ${perRound.map((r) => r.toFixed(2)).join(', ')}`;
  }
  return rows;
}

/** 3. lateness: items due at random moments over a window while the worker idles → handler start − due time. */
export async function latenessWorkload(ctx: BenchContext, subjects: Subject[]): Promise<Row[]> {
  const count = ctx.quick ? 100 : 1000;
  const windowMs = ctx.quick ? 2000 : 10_000;
  // Time to enqueue them all before the first is due.
  const leadMs = ctx.quick ? 800 : 1500;
  const samples = await alternate(
    ctx,
    subjects,
    'lateness',
    async (subject) => {
      const queue = await subject.create();
      try {
        const lateness: number[] = [];
        const stop = await queue.startWorker({
          concurrency: 16,
          onJob: (dueAt) => lateness.push(Date.now() - dueAt),
        });
        const start = Date.now() + leadMs;
        const list = items(count, () => start + Math.floor(Math.random() * windowMs));
        for (let i = 0; i < list.length; i += 100) await queue.enqueueBatch(list.slice(i, i + 100));
        const all = await until(() => lateness.length >= count, windowMs + (ctx.quick ? 10_000 : 60_000), 20);
        await stop();
        if (!all) throw new Error(`${subject.name} delivered only ${lateness.length} of ${count}`);
        return {
          p50: percentile(lateness, 50),
          p95: percentile(lateness, 95),
          p99: percentile(lateness, 99),
          max: Math.max(...lateness),
          delivered: lateness.length,
        };
      } finally {
        await queue.close();
      }
    },
    { p50: Number.NaN, p95: Number.NaN, p99: Number.NaN, max: Number.NaN, delivered: 0 },
  );
  const rows: Row[] = [];
  for (const key of ['p50', 'p95', 'p99', 'max'] as const) {
    const byMetric = new Map([...samples].map(([name, values]) => [name, values.map((v) => v[key])]));
    rows.push(
      ...rowsFor(
        'lateness',
        `${count} items over ${windowMs / 1000} s, ${key}`,
        'ms',
        'lower',
        subjects,
        byMetric,
      ),
    );
  }
  return rows;
}
