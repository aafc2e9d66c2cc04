import { expect, it } from 'vitest';
import { waitFor } from '../harness.js';
import type { SuiteContext } from '../suite.js';

const TTL = 400;

/** Lease exclusivity, expiry, renewal, release and fencing, judged by the backend's clock. */
export function leaseTests({ harness }: SuiteContext): void {
  it('grants a lease to exactly one of 8 concurrent contenders', async () => {
    const first = await harness().open();
    const others = await Promise.all([1, 2, 3].map(() => harness().open(first.namespace)));
    const backends = [first, ...others];
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        backends[i % backends.length]!.leases.acquire('group/a', `owner-${i}`, 10_000),
      ),
    );
    const winners = results.filter((r) => r !== undefined);
    expect(winners).toHaveLength(1);
    const holder = await first.leases.holder('group/a');
    expect(holder?.owner).toBe(`owner-${results.findIndex((r) => r !== undefined)}`);
    expect(holder?.token).toBe(winners[0]?.token);
    expect(holder!.remainingMs).toBeGreaterThan(0);
    expect(holder!.remainingMs).toBeLessThanOrEqual(10_000);
  });

  it('lets the holder re-acquire and renew, keeping its token; others are refused', async () => {
    const { leases } = await harness().open();
    const grant = await leases.acquire('k', 'a', 10_000);
    expect(grant).toBeDefined();
    expect(await leases.acquire('k', 'b', 10_000)).toBeUndefined();
    expect((await leases.acquire('k', 'a', 10_000))?.token).toBe(grant!.token);
    expect((await leases.renew('k', 'a', grant!.token, 10_000))?.token).toBe(grant!.token);
    expect(await leases.renew('k', 'b', grant!.token, 10_000)).toBeUndefined();
    expect(await leases.renew('k', 'a', grant!.token + 1, 10_000)).toBeUndefined();
  });

  it('expires a lease after its TTL, and a renew can never resurrect it', async () => {
    const { leases } = await harness().open();
    const grant = await leases.acquire('exp', 'a', TTL);
    expect(grant).toBeDefined();
    await waitFor('the lease to expire', async () => (await leases.holder('exp')) === undefined, {
      timeoutMs: 10_000,
    });
    expect(await leases.renew('exp', 'a', grant!.token, TTL)).toBeUndefined();
    const next = await leases.acquire('exp', 'b', 10_000);
    expect(next!.token).toBeGreaterThan(grant!.token);
  });

  it('releases only for the holder with the right token', async () => {
    const { leases } = await harness().open();
    const grant = await leases.acquire('rel', 'a', 10_000);
    expect(await leases.release('rel', 'b', grant!.token)).toBe(false);
    expect(await leases.release('rel', 'a', grant!.token + 1)).toBe(false);
    expect((await leases.holder('rel'))?.owner).toBe('a');
    expect(await leases.release('rel', 'a', grant!.token)).toBe(true);
    expect(await leases.holder('rel')).toBeUndefined();
    expect(await leases.release('rel', 'a', grant!.token)).toBe(false);
  });

  it('issues fencing tokens that strictly increase across holders, after release and after expiry', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    const tokens: number[] = [];
    const a = await first.leases.acquire('fence', 'a', 10_000);
    tokens.push(a!.token);
    await first.leases.release('fence', 'a', a!.token);
    const b = await second.leases.acquire('fence', 'b', TTL);
    tokens.push(b!.token);
    await waitFor('b to expire', async () => (await first.leases.holder('fence')) === undefined, {
      timeoutMs: 10_000,
    });
    const c = await first.leases.acquire('fence', 'c', 10_000);
    tokens.push(c!.token);
    await first.leases.release('fence', 'c', c!.token);
    const a2 = await second.leases.acquire('fence', 'a', 10_000);
    tokens.push(a2!.token);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1]!);
    // Tokens are per key: another key's history does not matter, but its tokens also only grow.
    const other = await first.leases.acquire('fence/other', 'a', 10_000);
    expect(other!.token).toBeGreaterThan(0);
  });

  it('keeps leases of different keys independent', async () => {
    const { leases } = await harness().open();
    expect(await leases.acquire('x/1', 'a', 10_000)).toBeDefined();
    expect(await leases.acquire('x/2', 'b', 10_000)).toBeDefined();
    expect((await leases.holder('x/1'))?.owner).toBe('a');
    expect((await leases.holder('x/2'))?.owner).toBe('b');
  });
}

/** Cursor monotonicity and expiry. */
export function cursorTests({ harness }: SuiteContext): void {
  it('reads undefined for an unknown cursor, and advance keeps the maximum', async () => {
    const first = await harness().open();
    const second = await harness().open(first.namespace);
    const { cursors } = first;
    expect(await cursors.read('sched/a')).toBeUndefined();
    const t1 = new Date('2026-03-01T10:00:00Z');
    const t2 = new Date('2026-03-01T11:00:00Z');
    expect((await cursors.advance('sched/a', t1, 60_000)).getTime()).toBe(t1.getTime());
    expect((await cursors.advance('sched/a', t2, 60_000)).getTime()).toBe(t2.getTime());
    expect((await second.cursors.advance('sched/a', t1, 60_000)).getTime()).toBe(t2.getTime());
    expect((await second.cursors.read('sched/a'))?.getTime()).toBe(t2.getTime());
    expect(await cursors.read('sched/b')).toBeUndefined();
  });

  it('keeps the maximum under concurrent advances', async () => {
    const { cursors } = await harness().open();
    const base = Date.UTC(2026, 5, 1);
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        cursors.advance('race', new Date(base + ((i * 7) % 20) * 1000), 60_000),
      ),
    );
    expect((await cursors.read('race'))?.getTime()).toBe(base + 19 * 1000);
  });

  it('forgets a cursor after its TTL', async () => {
    const { cursors } = await harness().open();
    await cursors.advance('ttl', new Date('2026-03-01T10:00:00Z'), TTL);
    expect(await cursors.read('ttl')).toBeDefined();
    await waitFor('the cursor to expire', async () => (await cursors.read('ttl')) === undefined, {
      timeoutMs: 10_000,
    });
  });
}
