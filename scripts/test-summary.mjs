#!/usr/bin/env node
// Sums the vitest JSON report (`.vitest-report.json`, written through vitest.shared.ts) of every workspace
// package that has a `test` script into one closing line, `N passed, N failed`. Anything that kept tests from
// being counted is a failure too: a missing or unreadable report, a file that failed to load, a run with no
// tests, a test command that failed without a failing test, a step before the tests that failed.
//
// Usage:
//   node scripts/test-summary.mjs --clean [--root DIR]        delete stale reports before a test run
//   node scripts/test-summary.mjs [--root DIR] [--test-exit CODE] [--failed-step NAME]...
// Exits 1 when anything failed, else 0.
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

const REPORT = '.vitest-report.json';

function parseArgs(argv) {
  const args = { root: process.cwd(), clean: false, testExit: 0, failedSteps: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) throw new Error(`${arg} needs a value`);
      return next;
    };
    if (arg === '--root') args.root = resolve(value());
    else if (arg === '--clean') args.clean = true;
    else if (arg === '--test-exit') args.testExit = Number(value());
    else if (arg === '--failed-step') args.failedSteps.push(value());
    else throw new Error(`unknown argument ${arg}`);
  }
  return args;
}

/** The `packages:` globs of pnpm-workspace.yaml; only `dir` and `dir/*` forms are used in this repository. */
function workspaceGlobs(root) {
  const globs = [];
  let inPackages = false;
  for (const line of readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8').split('\n')) {
    if (/^\S/.test(line)) inPackages = /^packages:\s*$/.test(line);
    const item = inPackages && /^\s+-\s+['"]?([^'"#\s]+)['"]?/.exec(line);
    if (item) globs.push(item[1]);
  }
  return globs;
}

function workspaceDirs(root) {
  const dirs = [];
  for (const glob of workspaceGlobs(root)) {
    if (glob.startsWith('!')) continue;
    if (glob.endsWith('/*')) {
      const parent = join(root, glob.slice(0, -2));
      if (!existsSync(parent)) continue;
      for (const name of readdirSync(parent).sort()) {
        const dir = join(parent, name);
        if (statSync(dir).isDirectory() && existsSync(join(dir, 'package.json'))) dirs.push(dir);
      }
    } else if (glob.includes('*')) {
      throw new Error(`pnpm-workspace.yaml glob ${glob} is not supported by scripts/test-summary.mjs`);
    } else if (existsSync(join(root, glob, 'package.json'))) {
      dirs.push(join(root, glob));
    }
  }
  return dirs;
}

/** Packages whose `test` script runs vitest and so must leave a report. */
function testedPackages(root) {
  return workspaceDirs(root)
    .map((dir) => ({ dir, manifest: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) }))
    .filter(({ manifest }) => typeof manifest.scripts?.test === 'string')
    .map(({ dir, manifest }) => ({ dir, name: manifest.name ?? relative(root, dir) }));
}

/**
 * The first lines of a failed test's first error and where it was thrown in the test files (the summary
 * is often all that is kept of a run).
 */
function whyFailed(assertion) {
  const lines = String(assertion.failureMessages?.[0] ?? '')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');
  const at = lines.filter(
    (line) => line.startsWith('at ') && /\/test\/|\/src\//.test(line) && !line.includes('node_modules'),
  );
  return [...lines.filter((line) => !line.startsWith('at ')).slice(0, 4), ...at.slice(0, 2)].map((line) =>
    line.length > 300 ? `${line.slice(0, 300)}…` : line,
  );
}

/** Counts one package's report: passed and failed tests, skipped ones, and the reasons for extra failures. */
function countReport(path) {
  const report = JSON.parse(readFileSync(path, 'utf8'));
  const passed = report.numPassedTests ?? 0;
  const skipped = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);
  let failed = report.numFailedTests ?? 0;
  const problems = [];
  const failedNames = [];
  for (const file of report.testResults ?? []) {
    const assertions = file.assertionResults ?? [];
    for (const a of assertions)
      if (a.status === 'failed') failedNames.push({ name: a.fullName ?? a.title, why: whyFailed(a) });
    if (file.status === 'failed' && !assertions.some((a) => a.status === 'failed')) {
      failed += 1;
      const firstLine = String(file.message ?? '').split('\n')[0];
      problems.push(`${file.name}: ${firstLine || 'failed without a failing test'}`);
    }
  }
  if (report.success === false && failed === 0) {
    failed += 1;
    problems.push(
      report.numTotalTests === 0 ? 'no tests ran' : 'vitest reported failure without a failing test',
    );
  }
  return { passed, failed, skipped, problems, failedNames };
}

function summarize(args) {
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  for (const pkg of testedPackages(args.root)) {
    const path = join(pkg.dir, REPORT);
    let counts;
    if (!existsSync(path)) {
      counts = {
        passed: 0,
        failed: 1,
        skipped: 0,
        problems: [`no ${REPORT}: its tests did not run`],
        failedNames: [],
      };
    } else {
      try {
        counts = countReport(path);
      } catch (error) {
        counts = {
          passed: 0,
          failed: 1,
          skipped: 0,
          problems: [`unreadable ${REPORT}: ${String(error.message).split('\n')[0]}`],
          failedNames: [],
        };
      }
    }
    passed += counts.passed;
    failed += counts.failed;
    skipped += counts.skipped;
    const extra = counts.skipped > 0 ? `, ${counts.skipped} skipped` : '';
    console.log(`  ${pkg.name}: ${counts.passed} passed, ${counts.failed} failed${extra}`);
    for (const { name, why } of counts.failedNames.slice(0, 20)) {
      console.log(`    failed: ${name}`);
      for (const line of why) console.log(`      ${line}`);
    }
    for (const problem of counts.problems) console.log(`    ${problem}`);
  }
  if (args.testExit !== 0 && failed === 0) {
    failed += 1;
    console.log(`  the test command exited with ${args.testExit} though no test failed`);
  }
  for (const step of args.failedSteps) {
    failed += 1;
    console.log(`  step failed: ${step}`);
  }
  if (skipped > 0) console.log(`  ${skipped} tests skipped (not run)`);
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

function clean(args) {
  for (const pkg of testedPackages(args.root)) rmSync(join(pkg.dir, REPORT), { force: true });
  return 0;
}

const args = parseArgs(process.argv.slice(2));
process.exitCode = args.clean ? clean(args) : summarize(args);
