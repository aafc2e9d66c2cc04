import { describe, expect, it } from 'vitest';
import { decodeToken, encodeToken } from '../../src/jetstream-scheduler/index.js';
import { SubjectLayout, tokenFor } from '../../src/jetstream-scheduler/subjects.js';

describe('subject tokens', () => {
  it('keep readable keys readable and encode what a subject token cannot hold', () => {
    expect(encodeToken('order/ORD-1/expire')).toBe('order/ORD-1/expire');
    expect(encodeToken('a b.c*d>e')).toBe('a%20b%2Ec%2Ad%3Ee');
    expect(encodeToken('100%')).toBe('100%25');
    expect(encodeToken('$JS')).toBe('%24JS');
    expect(encodeToken('café')).toBe('caf%C3%A9');
    expect(encodeToken('😀')).toBe('%F0%9F%98%80');
  });

  it('round-trip every key and never map two keys to one token', () => {
    const keys = ['a.b', 'a%2Eb', 'a b', 'a\tb'.replace('\t', '_'), 'x>y', '*', 'ü', '😀/🎉', '%', '%%2E'];
    const tokens = keys.map(encodeToken);
    expect(new Set(tokens).size).toBe(keys.length);
    for (const [i, key] of keys.entries()) {
      expect(tokens[i]).toMatch(/^[A-Za-z0-9\-_/:=@+,~!%]+$/);
      expect(decodeToken(tokens[i] as string)).toBe(key);
    }
  });

  it('reject tokens no key encodes to', () => {
    expect(decodeToken('a.b')).toBeUndefined();
    expect(decodeToken('%2')).toBeUndefined();
    expect(decodeToken('%2e')).toBeUndefined();
    expect(decodeToken('%FF')).toBeUndefined();
  });

  it('reject keys with control characters and keys too long once encoded, naming the field and value', () => {
    expect(() => tokenFor('key', 'a\u0001b', 'key')).toThrowError(
      expect.objectContaining({ code: 'DUETIME_INVALID_ARGUMENT', field: 'key', value: 'a\u0001b' }),
    );
    expect(() => tokenFor('key', '', 'key')).toThrowError(expect.objectContaining({ field: 'key' }));
    const long = '😀'.repeat(200);
    expect(() => tokenFor('key', long, 'key')).toThrowError(
      expect.objectContaining({
        field: 'key',
        value: long,
        message: expect.stringContaining('2400 characters'),
      }),
    );
  });

  it('lay out one stream: definitions per timer and per cron name, fires per key', () => {
    const layout = new SubjectLayout('app.jobs');
    expect(layout.streamSubjects).toEqual([
      'app.jobs.sched.once.*.*',
      'app.jobs.sched.cron.*',
      'app.jobs.sched.fire.*',
      'app.jobs.sched.lease',
      'app.jobs.sched.clock',
    ]);
    expect(layout.keyOfFire('app.jobs.sched.fire.a%2Eb')).toBe('a.b');
    expect(layout.keyOfFire('app.jobs.sched.once.a.b')).toBeUndefined();
    expect(layout.keyOfFire('other.sched.fire.x')).toBeUndefined();
  });
});
