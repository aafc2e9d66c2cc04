import { BackendError, type LeaseBackend, type LeaseGrant, type LeaseHolder } from '../../src/index.js';

type Operation = 'acquire' | 'renew' | 'release' | 'holder';

/**
 * A lease backend in front of a real one, for tests: it can fail calls with a backend error, or hold
 * replies back until the test lets them through, per operation and key.
 */
export class FaultyLeases implements LeaseBackend {
  readonly calls: { op: Operation; key: string }[] = [];
  #failing = new Set<string>();
  #holding = new Set<string>();
  #held: (() => void)[] = [];

  constructor(readonly inner: LeaseBackend) {}

  /** Makes `op` (on `key`, or on every key when omitted) throw a transient BackendError. */
  fail(op: Operation, key = '*'): void {
    this.#failing.add(`${op} ${key}`);
  }

  /** Holds back the replies of `op` until {@link release}. The call reaches the backend at once. */
  hold(op: Operation, key = '*'): void {
    this.#holding.add(`${op} ${key}`);
  }

  /** Stops failing and holding, and lets every held reply through. */
  heal(): void {
    this.#failing.clear();
    this.#holding.clear();
    this.flush();
  }

  /** Lets the held replies through. */
  flush(): void {
    for (const resume of this.#held.splice(0)) resume();
  }

  count(op: Operation, key?: string): number {
    return this.calls.filter((c) => c.op === op && (key === undefined || c.key === key)).length;
  }

  #matches(set: Set<string>, op: Operation, key: string): boolean {
    return set.has(`${op} ${key}`) || set.has(`${op} *`);
  }

  async #call<T>(op: Operation, key: string, fn: () => Promise<T>): Promise<T> {
    this.calls.push({ op, key });
    if (this.#matches(this.#failing, op, key))
      throw new BackendError(`lease ${op}`, 'connection refused (injected)', { transient: true });
    const result = await fn();
    if (this.#matches(this.#holding, op, key)) await new Promise<void>((resolve) => this.#held.push(resolve));
    return result;
  }

  acquire(key: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    return this.#call('acquire', key, () => this.inner.acquire(key, owner, ttlMs));
  }

  renew(key: string, owner: string, token: number, ttlMs: number): Promise<LeaseGrant | undefined> {
    return this.#call('renew', key, () => this.inner.renew(key, owner, token, ttlMs));
  }

  release(key: string, owner: string, token: number): Promise<boolean> {
    return this.#call('release', key, () => this.inner.release(key, owner, token));
  }

  holder(key: string): Promise<LeaseHolder | undefined> {
    return this.#call('holder', key, () => this.inner.holder(key));
  }
}
