import { readFileSync } from 'node:fs';
import { COMMANDS } from './commands/index.js';
import { type CliIo, describeError, EXIT, exitCodeFor, processIo, UsageError } from './io.js';

const width = Math.max(...COMMANDS.map((c) => c.synopsis.length));

export const mainHelp = `duetime — durable schedules from the command line

Usage: duetime <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.synopsis.padEnd(width)}  ${c.summary}`).join('\n')}

Global options:
  --backend <url>   sqlite:./duetime.db (default), postgres://…, redis://…, nats://… (or DUETIME_BACKEND)
  --verbose         print stack traces with errors
  --help, -h        help for any command
  --version         print the version

Exit codes: 0 ok · 1 failures found · 2 usage error · 3 invalid input · 4 backend error ·
5 a needed package is not installed · 130 interrupted`;

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
  const find = (n: string | undefined) => COMMANDS.find((c) => c.name === n);
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const topic = name === 'help' ? find(rest[0]) : undefined;
    io.out(topic ? topic.help : mainHelp);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  if (name === '--version' || name === '-v') {
    io.out(version());
    return EXIT.ok;
  }
  const command = find(name);
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
