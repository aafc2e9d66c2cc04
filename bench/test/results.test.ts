import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { type ResultFile, resultsSection } from '../src/lib/readme.js';
import { rowsFor } from '../src/lib/report.js';
import { installedVersion, peerVersions } from '../src/lib/versions.js';
import { allSubjects, subjectByName, subjectNames } from '../src/subjects/index.js';

const pinned = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    devDependencies: Record<string, string>;
  }
).devDependencies;

const compared = [
  { name: 'duetime/postgres', library: 'duetime', backend: 'postgres' },
  { name: 'pg-boss', library: 'pg-boss', backend: 'postgres' },
  { name: 'pg-boss/best', library: 'pg-boss', backend: 'postgres' },
];

function file(rows: ResultFile['rows'], peers?: Record<string, string>): ResultFile {
  return {
    workload: 'drain',
    quick: false,
    rounds: 1,
    date: '2026-12-01T00:00:00.000Z',
    machine: { cpus: 2, cpuModel: 'test cpu', memoryGb: 1, node: 'v20.20.2' },
    ...(peers ? { peers } : {}),
    seconds: 1,
    rows,
  };
}

describe('bench subjects', () => {
  it('has each peer at its defaults and at its best, every name accepted by --subjects', () => {
    for (const name of [
      'pg-boss',
      'pg-boss/best',
      'graphile-worker',
      'graphile-worker/best',
      'bullmq',
      'bullmq/best',
    ])
      expect(subjectNames()).toContain(name);
    for (const subject of allSubjects()) expect(subjectByName(subject.name).name).toBe(subject.name);
    expect(new Set(subjectNames()).size).toBe(subjectNames().length);
    expect(() => subjectByName('bullmq-best')).toThrow(/unknown bench subject bullmq-best/);
  });
});

describe('peer versions', () => {
  it('reads the installed release of packages that do not export their package.json', () => {
    expect(installedVersion('graphile-worker')).toBe(pinned['graphile-worker']);
    expect(installedVersion('pg-boss')).toBe(pinned['pg-boss']);
    expect(installedVersion('no-such-package-here')).toBeUndefined();
  });

  it('records only the peers with rows', () => {
    expect(peerVersions(['duetime/postgres', 'pg-boss/best', 'croner (utcOffset: 0)'])).toEqual({
      'pg-boss': pinned['pg-boss'],
      croner: pinned.croner,
    });
  });
});

describe('results section', () => {
  const rowsOf = (subjects: typeof compared) =>
    rowsFor(
      'drain',
      '3 due items, concurrency 1',
      'items/s',
      'higher',
      subjects,
      new Map([
        ['duetime/postgres', [100]],
        ['pg-boss', [200]],
        ['pg-boss/best', [50]],
      ]),
    );

  it('labels the peers of a file that records no versions with their release of that time', () => {
    // Such a file has one row per peer, named as the defaults row is named now.
    const section = resultsSection(['drain'], () => file(rowsOf(compared.slice(0, 2))));
    expect(section).toContain('| pg-boss@10.4.2 |');
    expect(section).toContain('vs pg-boss@10.4.2: **0.50×** ✗ behind');
    expect(section).toContain("Measured before the peers' upgrade: pg-boss@10.4.2");
    expect(section).toContain(
      '- drain: 3 due items, concurrency 1: duetime/postgres vs pg-boss@10.4.2, 0.50×',
    );
    expect(section).not.toContain('| pg-boss |');
  });

  it('keeps the subjects of a file that records its versions, and names them', () => {
    const section = resultsSection(['drain'], () => file(rowsOf(compared), { 'pg-boss': '12.38.0' }));
    expect(section).toContain('| pg-boss |');
    expect(section).toContain('| pg-boss/best |');
    expect(section).toContain('vs pg-boss/best: **2.00×** ✓');
    expect(section).toContain('; peers: pg-boss 12.38.0_');
    expect(section).not.toContain('@10.4.2');
    expect(section).not.toContain('Measured before');
  });
});
