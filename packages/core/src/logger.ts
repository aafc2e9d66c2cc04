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

/** Discards everything. The default: a library stays quiet unless asked. */
export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
};

/** Writes to the console, one line per entry, fields as JSON. `debug` lines only when `verbose`. */
export function consoleLogger(options: { verbose?: boolean; prefix?: string } = {}): Logger {
  const prefix = options.prefix ? `${options.prefix} ` : '';
  const line = (message: string, fields?: Record<string, unknown>) =>
    fields && Object.keys(fields).length > 0
      ? `${prefix}${message} ${safeJson(fields)}`
      : `${prefix}${message}`;
  return {
    debug: (m, f) => {
      if (options.verbose) console.debug(line(m, f));
    },
    info: (m, f) => console.info(line(m, f)),
    warn: (m, f) => console.warn(line(m, f)),
    error: (m, f) => console.error(line(m, f)),
  };
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value, (_k, v) => (v instanceof Error ? { name: v.name, message: v.message } : v));
  } catch {
    return '[unserialisable fields]';
  }
}
