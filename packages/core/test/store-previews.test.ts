import { describe, expect, it } from 'vitest';
import {
  createStore,
  type DeadLetterListQuery,
  MemoryDatabase,
  type Message,
  memoryAdapter,
} from '../src/index.js';

const HOUR = 3_600_000;
const BIG = { note: 'x'.repeat(100_000) };

/** Keeps a dead letter in the memory database, in the form a delivery that gave up leaves it. */
function keepDead(db: MemoryDatabase, key: string, message: Message): void {
  const now = Date.now();
  db.deadLetters.set(
    key,
    JSON.stringify({ key, version: 1, at: now, message, attempts: 3, error: 'boom', deadAt: now }),
  );
}

describe('previews and counts through core, for adapters that answer neither', () => {
  it('cuts the data of a page after loading it, counting code points, and leaves loads whole', async () => {
    const db = new MemoryDatabase();
    const store = createStore(memoryAdapter(db));
    const messages: Record<string, Message> = {
      'p/big': { type: 'big', aggregateId: 'A-1', data: BIG },
      'p/emoji': { type: 'emoji', data: '😀'.repeat(10) },
      'p/none': { type: 'none' },
    };
    await store.transact(async (tx) => {
      for (const [key, message] of Object.entries(messages))
        await tx.schedule(key, new Date(Date.now() + HOUR), message);
    });
    for (const [key, message] of Object.entries(messages)) keepDead(db, key, message);
    for (const items of [
      (await store.pageSchedules({ preview: 5 })).items,
      (await store.pageDeadLetters({ preview: 5 })).items,
    ]) {
      const byKey = new Map(items.map((item) => [item.key, item]));
      expect(byKey.get('p/big')?.message).toEqual({ type: 'big', aggregateId: 'A-1' });
      expect(byKey.get('p/big')?.dataPreview).toEqual({ text: '{"not', cut: true });
      expect(byKey.get('p/emoji')?.dataPreview).toEqual({ text: `"${'😀'.repeat(4)}`, cut: true });
      expect(byKey.get('p/none')?.dataPreview).toBeUndefined();
      for (const item of items) expect(item.message).not.toHaveProperty('data');
    }
    const [small] = (await store.pageSchedules({ prefix: 'p/emoji', preview: 12 })).items;
    expect(small?.dataPreview).toEqual({ text: JSON.stringify('😀'.repeat(10)), cut: false });
    expect((await store.loadSchedule('p/big'))?.message.data).toEqual(BIG);
    expect((await store.loadDeadLetter('p/big'))?.message.data).toEqual(BIG);
    for (const preview of [0, 1.5, '10', 262_145])
      await expect(store.pageSchedules({ preview: preview as number })).rejects.toMatchObject({
        code: 'DUETIME_INVALID_ARGUMENT',
        field: 'query.preview',
      });
  });

  it("uses the adapter's own dead-letter count when it has one, bounded by the limit", async () => {
    const db = new MemoryDatabase();
    for (let i = 0; i < 30; i++) keepDead(db, `${i < 10 ? 'a' : 'b'}/${i}`, { type: 't', data: i });
    const plain = createStore(memoryAdapter(db));
    expect(await plain.countDeadLetters({ prefix: 'a/' })).toBe(10);
    expect(await plain.countDeadLetters({ limit: 25 })).toBe(25);

    const asked: { prefix?: string; limit: number }[] = [];
    const adapter = memoryAdapter(db);
    const listed: DeadLetterListQuery[] = [];
    const list = adapter.listDeadLetters.bind(adapter);
    adapter.listDeadLetters = (query) => {
      listed.push(query);
      return list(query);
    };
    // An engine's own count, here one that counts keys without decoding any record.
    adapter.countDeadLetters = async (query) => {
      asked.push(query);
      const keys = [...db.deadLetters.keys()].filter((k) => k.startsWith(query.prefix ?? ''));
      return keys.length;
    };
    const counting = createStore(adapter);
    expect(await counting.countDeadLetters({ prefix: 'b/' })).toBe(20);
    expect(await counting.countDeadLetters({ limit: 25 })).toBe(25);
    expect(asked).toEqual([{ prefix: 'b/', limit: 10_000 }, { limit: 25 }]);
    expect(listed).toEqual([]);
  });
});
