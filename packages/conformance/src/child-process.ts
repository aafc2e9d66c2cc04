import type { ChildProcess } from 'node:child_process';

/**
 * A child process whose standard output is read line by line, for tests that start workers, wait for
 * what they print, and kill them: the conformance suite's process tests, and an adapter's own.
 */
export interface WorkerProcess {
  readonly child: ChildProcess;
  /** Every stdout line so far. */
  readonly lines: string[];
  /** Resolves with the first line (past or future) matching `pattern`; rejects on exit or timeout. */
  line(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM (SIGKILL after `timeoutMs`), and wait for the exit; returns the exit code. */
  stop(timeoutMs?: number): Promise<number | null>;
  /** Resolves with the exit code (null when a signal ended it). */
  readonly exited: Promise<number | null>;
  /** The last few kilobytes of standard error. */
  stderr(): string;
  /** Whether it is still running (not exited, not killed). */
  alive(): boolean;
}

export interface WatchOptions {
  /** How the process is named in errors (default `child`). */
  label?: string;
  /** Default timeout of `line` (default 30 s). */
  lineTimeoutMs?: number;
  /** Default grace of `stop` before SIGKILL (default 20 s). */
  stopTimeoutMs?: number;
  /** How much of standard error to keep (default 4,000 characters). */
  stderrChars?: number;
}

/**
 * Wraps a child spawned with `stdio: ['ignore', 'pipe', 'pipe']`: collects its stdout lines, keeps the
 * tail of its stderr, and answers `line(pattern)` waits. Errors name the process and quote its stderr.
 */
export function watchChild(child: ChildProcess, options: WatchOptions = {}): WorkerProcess {
  const label = options.label ?? 'child';
  const keep = options.stderrChars ?? 4000;
  const lines: string[] = [];
  const waiters: { pattern: RegExp; resolve: (line: string) => void }[] = [];
  let buffer = '';
  let stderr = '';
  let ended = false;
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 1);
      lines.push(line);
      for (const w of [...waiters])
        if (w.pattern.test(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
    }
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-keep);
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      ended = true;
      resolve(code);
    }),
  );
  const alive = () => !ended && child.exitCode === null && child.signalCode === null;
  return {
    child,
    lines,
    exited,
    alive,
    stderr: () => stderr,
    line(pattern, timeoutMs = options.lineTimeoutMs ?? 30_000) {
      const seen = lines.find((l) => pattern.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const drop = () => {
          const i = waiters.indexOf(waiter);
          if (i < 0) return false;
          waiters.splice(i, 1);
          clearTimeout(timer);
          return true;
        };
        const waiter = {
          pattern,
          resolve: (line: string) => {
            clearTimeout(timer);
            resolve(line);
          },
        };
        const timer = setTimeout(() => {
          if (drop())
            reject(
              new Error(`${label} printed no line matching ${pattern} in ${timeoutMs} ms; stderr: ${stderr}`),
            );
        }, timeoutMs);
        waiters.push(waiter);
        void exited.then((code) => {
          if (drop())
            reject(new Error(`${label} exited (${code}) before printing ${pattern}; stderr: ${stderr}`));
        });
      });
    },
    async kill() {
      if (alive()) child.kill('SIGKILL');
      await exited;
    },
    async stop(timeoutMs = options.stopTimeoutMs ?? 20_000) {
      if (!alive()) return child.exitCode;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
