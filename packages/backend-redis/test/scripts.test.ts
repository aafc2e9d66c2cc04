import { readdirSync, readFileSync } from 'node:fs';
import { Dispatcher } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { buildScripts } from '../scripts/embed-lua.mjs';
import { luaScripts } from '../src/lua/scripts.generated.js';
import { message, redisFixture, waitFor } from './helpers.js';

const fx = redisFixture();
const luaDir = new URL('../src/lua/', import.meta.url);

describe('embedded Lua commands', () => {
  it('match the .lua sources (run `node scripts/embed-lua.mjs` after editing one)', () => {
    const built = buildScripts(luaDir.pathname.replace(/\/$/, ''));
    expect(Object.keys(luaScripts).sort()).toEqual(Object.keys(built).sort());
    for (const [name, script] of Object.entries(luaScripts)) {
      expect(script.source, name).toBe(built[name]?.source);
      expect(script.sha, name).toBe(built[name]?.sha);
    }
  });

  it('open each command with a comment saying what it does, its KEYS, ARGV and what it returns', () => {
    for (const file of readdirSync(luaDir).filter((f) => f.endsWith('.lua'))) {
      const text = readFileSync(new URL(file, luaDir), 'utf8');
      const lines = text.split('\n');
      const header = lines.slice(
        0,
        lines.findIndex((line) => !line.startsWith('--')),
      );
      expect(header[0], file).toMatch(new RegExp(`^-- ${file.slice(0, -4)}: `));
      const comment = header.join('\n');
      expect(comment, file).toMatch(/KEYS\[1/);
      expect(comment, file).toMatch(/Returns /);
    }
  });

  it('recovers when the server forgets its scripts mid-run (SCRIPT FLUSH): NOSCRIPT, then the script is sent again', async () => {
    const prefix = fx.prefix();
    const backend = await fx.open(prefix);
    const other = await fx.open(prefix);
    const delivered: string[] = [];
    const dispatcher = new Dispatcher({
      store: backend.store,
      rescanInterval: 50,
      processor: async (_tx, m) => {
        delivered.push(m.aggregateId!);
      },
    });
    const controller = new AbortController();
    const done = dispatcher.run(controller.signal);
    try {
      for (let round = 0; round < 5; round++) {
        await fx.admin.script('FLUSH');
        await other.store.transact((tx) =>
          tx.schedule(`flush/${round}`, new Date(Date.now() - 1), message(`r${round}`)),
        );
        const lease = await other.leases.acquire(`flush/${round}`, 'me', 10_000);
        expect(lease?.token).toBeGreaterThan(0);
        await waitFor(`round ${round} to be delivered`, () => delivered.includes(`r${round}`));
      }
      expect(dispatcher.snapshot().failed).toBe(0);
      expect(await backend.store.listSchedules()).toEqual([]);
      expect([...delivered].sort()).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
      // The scripts are cached again: EVALSHA works without a fallback.
      expect(await fx.admin.script('EXISTS', luaScripts.commit.sha, luaScripts.deliver.sha)).toEqual([1, 1]);
    } finally {
      controller.abort();
      await done;
    }
  });
});
