import type { CliIo } from '../io.js';
import { conformanceCommand, conformanceHelp } from './conformance.js';
import { dashboardCommand, dashboardHelp } from './dashboard.js';
import { migrateCommand, migrateHelp } from './migrate.js';
import { describeCommand, describeHelp, runCommand, runHelp } from './registry.js';
import { schedulesCommand, schedulesHelp } from './schedules.js';
import { nextCommand, nextHelp, validateCommand, validateHelp } from './time.js';

/** One `duetime <name>` command. A new command is one more entry in {@link COMMANDS}. */
export interface CliCommand {
  name: string;
  /** How it is called, for the main help: `next "<cron>" --tz <zone>`. */
  synopsis: string;
  /** What it does, in one line. */
  summary: string;
  /** Its full help text (`duetime <name> --help`), starting with `Usage:`. */
  help: string;
  /** Runs it with the arguments after its name; resolves to the exit code. */
  run(args: string[], io: CliIo): Promise<number>;
}

/** Every command, in the order the main help lists them. */
export const COMMANDS: readonly CliCommand[] = [
  {
    name: 'next',
    synopsis: 'next "<cron>" --tz <zone>',
    summary: 'the next occurrences in local and UTC time, marking DST gaps and repeats',
    help: nextHelp,
    run: nextCommand,
  },
  {
    name: 'validate',
    synopsis: 'validate "<cron>" --tz <zone>',
    summary: 'check a cron expression',
    help: validateHelp,
    run: validateCommand,
  },
  {
    name: 'schedules',
    synopsis: 'schedules <subcommand>',
    summary:
      'list, show, cancel, pause, resume or trigger schedules; retry or discard dead letters (never creates a store)',
    help: schedulesHelp,
    run: schedulesCommand,
  },
  {
    name: 'describe',
    synopsis: 'describe <module>',
    summary: "print a module's calendar declarations and their next occurrences",
    help: describeHelp,
    run: describeCommand,
  },
  {
    name: 'run',
    synopsis: 'run <module>',
    summary: "run a module's scheduler (and dispatcher) until SIGINT/SIGTERM",
    help: runHelp,
    run: runCommand,
  },
  {
    name: 'dashboard',
    synopsis: 'dashboard [--backend <url>]',
    summary: 'serve a status page of the store on 127.0.0.1 (read-only unless --allow-actions)',
    help: dashboardHelp,
    run: dashboardCommand,
  },
  {
    name: 'migrate',
    synopsis: "migrate --backend 'nats://host:4222?prefix=<p>'",
    summary: 'move a NATS store of the earlier format (0.1) to the current one',
    help: migrateHelp,
    run: migrateCommand,
  },
  {
    name: 'conformance',
    synopsis: 'conformance <adapter-module>',
    summary: 'run the conformance suite against an adapter',
    help: conformanceHelp,
    run: conformanceCommand,
  },
];
