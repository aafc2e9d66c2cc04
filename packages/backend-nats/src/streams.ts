import { InvalidArgumentError, isTransient } from '@duetime/core';

/**
 * A stream of the backend's name exists with settings the backend cannot work with (another application
 * uses the prefix, or it was created with other options). It is never changed or purged.
 */
export class StreamMismatchError extends InvalidArgumentError {
  readonly stream: string;
  readonly mismatches: readonly string[];

  constructor(stream: string, mismatches: string[]) {
    super(`stream ${stream}`, mismatches, 'exists with other settings than this backend needs');
    this.message = `stream ${stream} exists with other settings than this backend needs: ${mismatches.join('; ')}. Use another prefix, or delete the stream if its data is not needed (duetime never changes or purges it)`;
    this.stream = stream;
    this.mismatches = mismatches;
  }
}

/**
 * Creates something with `add`; when that fails, reads it with `read` (another process may have created it
 * first), and when that fails too, throws `wrap` of the creation's error.
 */
export async function addOrRead<T>(
  add: () => Promise<T>,
  read: () => Promise<T>,
  wrap: (error: unknown) => Error,
): Promise<T> {
  try {
    return await add();
  } catch (error) {
    try {
      return await read();
    } catch {
      throw wrap(error);
    }
  }
}

/**
 * Runs `op`, retrying transient failures for up to `ms`: right after a replicated stream is created, its
 * leader may not be elected yet and JetStream does not answer for it.
 */
export async function whileStarting<T>(op: () => Promise<T>, ms = 10_000): Promise<T> {
  const deadline = performance.now() + ms;
  for (let attempt = 0; ; attempt++) {
    try {
      return await op();
    } catch (error) {
      if (!isTransient(error) || performance.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.min(500, 25 * 2 ** attempt)));
    }
  }
}

export interface StreamSettings {
  name: string;
  subjects: readonly string[];
  /** Atomic batch publish, rollup headers and per-message TTLs (the store stream). */
  atomic?: boolean;
  /** JetStream message schedules (the store stream's timers; NATS 2.12 and later). */
  schedules?: boolean;
  maxPerSubject: number;
  storage: 'file' | 'memory';
  replicas: number;
  duplicateWindowMs: number;
}
