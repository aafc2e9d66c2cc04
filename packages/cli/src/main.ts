import { readFileSync } from 'node:fs';
import { conformanceCommand, conformanceHelp } from './commands/conformance.js';
import { describeCommand, describeHelp, runCommand, runHelp } from './commands/registry.js';
import { schedulesCommand, schedulesHelp } from './commands/schedules.js';
import { nextCommand, nextHelp, validateCommand, validateHelp } from './commands/time.js';
import { type CliIo, describeError, EXIT, exitCodeFor, processIo, UsageError } from './io.js';

export const mainHelp = `duetime — durable schedules from the command line

Usage: duetime <command> [options]

Commands:
  next "<cron>" --tz <zone>     the next occurrences in local and UTC time, marking DST gaps and repeats
  validate "<cron>" --tz <zone> check a cron expression
  schedules list|show|cancel    inspect and cancel pending one-shot schedules
  describe <module>             print a module's calendar declarations and their next occurrences
  run <module>                  run a module's scheduler (and dispatcher) until SIGINT/SIGTERM
  conformance <adapter-module>  run the conformance suite against an adapter

Global options:
  --backend <url>   sqlite:./duetime.db (default), postgres://…, redis://…, nats://… (or DUETIME_BACKEND)
  --verbose         print stack traces with errors
  --help, -h        help for any command
  --version         print the version

Exit codes: 0 ok · 1 failures found · 2 usage error · 3 invalid input · 4 backend error · 130 interrupted`;

const commands: Record<string, { run: (args: string[], io: CliIo) => Promise<number>; help: string }> = {
  next: { run: nextCommand, help: nextHelp },
  validate: { run: validateCommand, help: validateHelp },
  schedules: { run: schedulesCommand, help: schedulesHelp },
  describe: { run: describeCommand, help: describeHelp },
  run: { run: runCommand, help: runHelp },
  conformance: { run: conformanceCommand, help: conformanceHelp },
};

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

/** Runs the CLI with `argv` (without the node and script paths); resolves to the exit code. */
export async function runCli(argv: string[], io: CliIo = processIo()): Promise<number> {
  const verbose = argv.includes('--verbose');
  const args = argv.filter((a) => a !== '--verbose');
  const [name, ...rest] = args;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const topic = name === 'help' ? rest[0] : undefined;
    io.out(topic && commands[topic] ? commands[topic].help : mainHelp);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  if (name === '--version' || name === '-v') {
    io.out(version());
    return EXIT.ok;
  }
  const command = commands[name];
  if (!command) {
    io.err(`duetime: unknown command ${JSON.stringify(name)}; run duetime --help`);
    return EXIT.usage;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    io.out(command.help);
    return EXIT.ok;
  }
  try {
    return await command.run(rest, io);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      io.err(`duetime ${name}: ${(error as Error).message}; run duetime ${name} --help`);
      return EXIT.usage;
    }
    if (error instanceof UsageError) {
      io.err(`duetime ${name}: ${error.message}; run duetime ${name} --help`);
      return EXIT.usage;
    }
    io.err(`duetime ${name}: ${describeError(error, verbose)}`);
    return exitCodeFor(error);
  }
}
