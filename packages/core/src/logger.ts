/**
 * Where duetime reports what it does. Structured: a message plus a flat record of fields. Compatible with
 * pino, bunyan and console-like loggers through {@link consoleLogger} or a small adapter.
 */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** Discards everything. Pass it as `logger` to silence duetime entirely. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
};

/** Severities, least to most severe. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const LEVELS: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export interface ConsoleLoggerOptions {
  /** The least severe entries written (default `info`; `debug` also with `verbose: true`). */
  level?: LogLevel;
  /** Same as `level: 'debug'`. */
  verbose?: boolean;
  /** Put in front of every line, e.g. `duetime`. */
  prefix?: string;
}

/** Writes to the console, one line per entry at `level` or above, fields as JSON. */
export function consoleLogger(options: ConsoleLoggerOptions = {}): Logger {
  const prefix = options.prefix ? `${options.prefix} ` : '';
  const least = LEVELS[options.verbose ? 'debug' : (options.level ?? 'info')];
  const line = (message: string, fields?: Record<string, unknown>) =>
    fields && Object.keys(fields).length > 0
      ? `${prefix}${message} ${safeJson(fields)}`
      : `${prefix}${message}`;
  const at = (level: LogLevel, write: (text: string) => void) => (m: string, f?: Record<string, unknown>) => {
    if (LEVELS[level] >= least) write(line(m, f));
  };
  return {
    debug: at('debug', (t) => console.debug(t)),
    info: at('info', (t) => console.info(t)),
    warn: at('warn', (t) => console.warn(t)),
    error: at('error', (t) => console.error(t)),
  };
}

/**
 * What duetime logs to when given no logger: warnings and errors on the console (a failed delivery, a
 * dead letter, a lost lease), nothing below. Pass `logger` (your own, {@link pinoLogger}, or
 * {@link silentLogger}) to change it.
 */
export const defaultLogger: Logger = consoleLogger({ level: 'warn', prefix: 'duetime' });

/** The slice of a pino (or bunyan) logger duetime uses: fields first, then the message. */
export interface PinoLike {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
}

/**
 * Adapts a pino-compatible logger (`logger.warn({ key }, 'message')` argument order) to duetime's
 * {@link Logger}: `createSqliteBackend({ logger: pinoLogger(pino()) })`. An `error` field that is an
 * `Error` is passed as `err`, so pino serialises it with its stack.
 */
export function pinoLogger(logger: PinoLike): Logger {
  const fieldsOf = (fields?: Record<string, unknown>): object => {
    if (!fields) return {};
    if (!(fields.error instanceof Error)) return fields;
    const { error, ...rest } = fields;
    return { ...rest, err: error };
  };
  return {
    debug: (m, f) => logger.debug(fieldsOf(f), m),
    info: (m, f) => logger.info(fieldsOf(f), m),
    warn: (m, f) => logger.warn(fieldsOf(f), m),
    error: (m, f) => logger.error(fieldsOf(f), m),
  };
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value, (_k, v) => (v instanceof Error ? { name: v.name, message: v.message } : v));
  } catch {
    return '[unserialisable fields]';
  }
}
