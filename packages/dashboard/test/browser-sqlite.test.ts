import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSqliteBackend } from '@duetime/backend-sqlite';
import { afterAll } from 'vitest';
import { browserSuite } from './browser.js';
import { hostileSuite } from './hostile.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function open() {
  const dir = await mkdtemp(join(tmpdir(), 'duetime-dashboard-'));
  dirs.push(dir);
  return createSqliteBackend({ filename: join(dir, 'store.db') });
}

browserSuite('SQLite', open);
hostileSuite('SQLite', open);
