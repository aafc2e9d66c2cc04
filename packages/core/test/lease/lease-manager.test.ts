import { describe, expect, it } from 'vitest';
import { createMemoryBackend, InvalidArgumentError, ManualClock } from '../../src/index.js';
import { LeaseLostError, LeaseManager } from '../../src/lease/lease-manager.js';
import { monotonicTime } from '../../src/lease/monotonic.js';
import { FaultyLeases } from './faulty-leases.js';

function setup(options: { ttl?: number; margin?: number } = {}) {
  const clock = new ManualClock(new Date('2026-03-01T00:00:00Z'));
  const backend = createMemoryBackend({ clock });
  const leases = new FaultyLeases(backend.leases);
  const lost: LeaseLostError[] = [];
  const manager = new LeaseManager({
    leases,
    key: 'group/leader',
    owner: 'me',
    ttl: options.ttl ?? 3000,
    margin: options.margin ?? 300,
    clock,
    onLost: (error) => lost.push(error),
  });
  return { clock, backend, leases, manager, lost };
}

describe('LeaseManager', () => {
  it('acquires, renews every ttl / 3 and keeps the lease far beyond its TTL', async () => {
    const { clock, backend, leases, manager, lost } = setup();
    expect(await manager.acquire()).toBe(true);
    expect(manager.held).toBe(true);
    const token = manager.token;
    expect(token).toBeGreaterThan(0);
    await clock.advance(999);
    expect(leases.count('renew')).toBe(0);
    await clock.advance(1);
    expect(leases.count('renew')).toBe(1);
    await clock.advance(30_000);
    expect(leases.count('renew')).toBe(31);
    expect(manager.held).toBe(true);
    expect(manager.token).toBe(token);
    expect((await backend.leases.holder('group/leader'))?.owner).toBe('me');
    expect(lost).toEqual([]);
  });

  it('reports contention as false and a backend error as an error, never one for the other', async () => {
    const { backend, leases, manager } = setup();
    await backend.leases.acquire('group/leader', 'someone-else', 10_000);
    expect(await manager.acquire()).toBe(false);
    expect(manager.held).toBe(false);
    leases.fail('acquire');
    await expect(manager.acquire()).rejects.toMatchObject({ code: 'DUETIME_BACKEND' });
  });

  it('measures validity from when the request was sent, not from when the reply came', async () => {
    const { clock, leases, manager } = setup({ ttl: 3000, margin: 300 });
    leases.hold('acquire');
    const acquiring = manager.acquire();
    await clock.advance(1000);
    leases.heal();
    expect(await acquiring).toBe(true);
    // Sent at 0: valid until 0 + 3000 - 300, whatever the reply's delay.
    expect(manager.remaining()).toBe(1700);
  });

  it('does not use a grant whose reply came after its validity ran out, and frees it', async () => {
    const { clock, backend, leases, manager } = setup({ ttl: 3000, margin: 300 });
    leases.hold('acquire');
    const acquiring = manager.acquire();
    await clock.advance(2700);
    leases.heal();
    expect(await acquiring).toBe(false);
    expect(manager.held).toBe(false);
    expect(await backend.leases.holder('group/leader')).toBeUndefined();
  });

  it('ends the holding when validity runs out while a renewal hangs; the late reply never restores it', async () => {
    const { clock, backend, leases, manager, lost } = setup({ ttl: 3000, margin: 300 });
    expect(await manager.acquire()).toBe(true);
    const signal = manager.signal;
    leases.hold('renew');
    await clock.advance(2699);
    expect(manager.held).toBe(true);
    expect(signal.aborted).toBe(false);
    await clock.advance(1);
    expect(manager.held).toBe(false);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LeaseLostError);
    expect(signal.reason).toMatchObject({ code: 'DUETIME_LEADERSHIP_LOST', reason: 'expired' });
    expect(lost.map((e) => e.reason)).toEqual(['expired']);
    // The renewal succeeded on the backend, but the reply is late: ownership is not restored, and the
    // lease is freed for others.
    leases.heal();
    await clock.advance(0);
    expect(manager.held).toBe(false);
    expect(manager.token).toBeUndefined();
    expect(await backend.leases.holder('group/leader')).toBeUndefined();
    expect(lost).toHaveLength(1);
  });

  it('does not free a lease it re-acquired while a late renewal reply was on its way', async () => {
    // Found by the reliability suite (PostgreSQL crash loop): a renewal queued behind busy connections
    // outlived the holding; the scheduler re-acquired (same owner, so the backend kept the token), and the
    // late renewal's reply then released that token on the backend while the new holding believed it
    // held the lease, so a second replica led at the same time.
    const { clock, backend, leases, manager } = setup({ ttl: 3000, margin: 300 });
    expect(await manager.acquire()).toBe(true);
    const token = manager.token;
    leases.hold('renew');
    await clock.advance(2700);
    expect(manager.held).toBe(false);
    leases.hold('acquire');
    const reacquiring = manager.acquire();
    await clock.advance(0);
    // The renewal's reply arrives first, then the re-acquisition's.
    leases.heal();
    expect(await reacquiring).toBe(true);
    await clock.advance(0);
    expect(manager.token).toBe(token);
    expect((await backend.leases.holder('group/leader'))?.owner).toBe('me');
    expect(await backend.leases.acquire('group/leader', 'other', 3000)).toBeUndefined();
  });

  it('waits for its own release to land before asking for the lease again', async () => {
    const { clock, backend, leases, manager } = setup({ ttl: 3000, margin: 300 });
    expect(await manager.acquire()).toBe(true);
    leases.hold('renew');
    await clock.advance(2700);
    expect(manager.held).toBe(false);
    // The late renewal's reply makes the manager release the lease; that release is slow.
    leases.hold('release');
    leases.flush();
    await clock.advance(0);
    expect(leases.count('release')).toBe(1);
    const reacquiring = manager.acquire();
    await clock.advance(0);
    expect(leases.count('acquire')).toBe(1);
    leases.heal();
    expect(await reacquiring).toBe(true);
    expect(manager.held).toBe(true);
    expect((await backend.leases.holder('group/leader'))?.owner).toBe('me');
  });

  it('keeps the holding through renewal errors while valid, and recovers when the backend does', async () => {
    const { clock, leases, manager, lost } = setup({ ttl: 3000, margin: 300 });
    expect(await manager.acquire()).toBe(true);
    leases.fail('renew');
    await clock.advance(2000);
    expect(leases.count('renew')).toBeGreaterThan(1);
    expect(manager.held).toBe(true);
    leases.heal();
    await clock.advance(600);
    expect(manager.held).toBe(true);
    await clock.advance(10_000);
    expect(manager.held).toBe(true);
    expect(lost).toEqual([]);
  });

  it('loses the holding (expired, not taken) when renewal errors outlast its validity', async () => {
    const { clock, leases, manager, lost } = setup({ ttl: 3000, margin: 300 });
    expect(await manager.acquire()).toBe(true);
    leases.fail('renew');
    await clock.advance(2700);
    expect(manager.held).toBe(false);
    expect(lost.map((e) => e.reason)).toEqual(['expired']);
  });

  it('loses the holding at once when the backend refuses a renewal', async () => {
    const { clock, backend, manager, lost } = setup({ ttl: 3000, margin: 300 });
    expect(await manager.acquire()).toBe(true);
    const token = manager.token!;
    // Someone frees and takes it behind our back (an operator, or an expiry on a paused process).
    await backend.leases.release('group/leader', 'me', token);
    await backend.leases.acquire('group/leader', 'other', 10_000);
    await clock.advance(1000);
    expect(manager.held).toBe(false);
    expect(lost.map((e) => e.reason)).toEqual(['taken']);
    expect(await manager.acquire()).toBe(false);
  });

  it('releases on request, aborting the signal without reporting a loss', async () => {
    const { backend, manager, lost } = setup();
    expect(await manager.acquire()).toBe(true);
    const signal = manager.signal;
    expect(await manager.release()).toBe(true);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toMatchObject({ reason: 'released' });
    expect(manager.held).toBe(false);
    expect(await backend.leases.holder('group/leader')).toBeUndefined();
    expect(lost).toEqual([]);
    // A new holding gets a greater fencing token.
    const other = await backend.leases.acquire('group/leader', 'other', 1000);
    expect(other!.token).toBeGreaterThan(1);
  });

  it('stops renewing on close and lets the lease expire on the backend', async () => {
    const { clock, backend, leases, manager } = setup();
    expect(await manager.acquire()).toBe(true);
    manager.close();
    await clock.advance(5000);
    expect(leases.count('renew')).toBe(0);
    expect(await backend.leases.holder('group/leader')).toBeUndefined();
    await expect(manager.acquire()).rejects.toMatchObject({ code: 'DUETIME_CLOSED' });
  });

  it('judges validity on a monotonic reading: a clock set back does not extend a holding', async () => {
    const { clock, leases, manager } = setup({ ttl: 3000, margin: 300 });
    expect(await manager.acquire()).toBe(true);
    leases.hold('renew');
    await clock.advance(2000);
    clock.set(clock.now() - 60_000);
    await clock.advance(60_700);
    expect(manager.held).toBe(false);
    const read = monotonicTime(clock);
    const before = read();
    clock.set(clock.now() - 1000);
    expect(read()).toBe(before);
  });

  it('rejects bad options naming the field and the value', () => {
    const { backend } = setup();
    const attempt = (options: Record<string, unknown>) => () =>
      new LeaseManager({ leases: backend.leases, key: 'k', ttl: 1000, ...options } as never);
    expect(attempt({ ttl: 0 })).toThrow(InvalidArgumentError);
    expect(attempt({ ttl: -5 })).toThrow(/options\.ttl -5/);
    expect(attempt({ key: '' })).toThrow(/options\.key ""/);
    expect(attempt({ margin: 1000 })).toThrow(/options\.margin 1000/);
    expect(attempt({ renewInterval: 950 })).toThrow(/options\.renewInterval 950/);
    expect(attempt({ leases: {} })).toThrow(/options\.leases/);
  });
});
