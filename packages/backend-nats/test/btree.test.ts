import { describe, expect, it } from 'vitest';
import {
  byKey,
  byTime,
  first,
  type Item,
  type NodeRef,
  type NodeWriter,
  type Root,
  remove,
  scan,
  type TreeNode,
  upsert,
} from '../src/state/btree.js';

/**
 * Node versions in a map, numbered like stream messages. `commit` ends a plan: it keeps only the latest
 * version of each slot still in the tree, as the state stream's retention eventually does.
 */
class MapNodes implements NodeWriter {
  readonly versions = new Map<number, TreeNode>();
  readonly latest = new Map<number, number>();
  nextSlot = 1;
  nextSeq = 1;
  async node(ref: NodeRef): Promise<TreeNode> {
    const node = this.versions.get(ref[1]);
    if (!node) throw new Error(`node version ${ref} missing`);
    return node;
  }
  alloc(): NodeRef {
    return [this.nextSlot++, 0];
  }
  write(ref: NodeRef, node: TreeNode): NodeRef {
    const seq = this.nextSeq++;
    this.versions.set(seq, Object.freeze(node));
    this.latest.set(ref[0], seq);
    return [ref[0], seq];
  }
  drop(ref: NodeRef): void {
    this.latest.delete(ref[0]);
  }
  commit(): void {
    const live = new Set(this.latest.values());
    for (const seq of [...this.versions.keys()]) if (!live.has(seq)) this.versions.delete(seq);
  }
}

async function all(root: Root, r: MapNodes): Promise<Item[]> {
  const out: Item[] = [];
  for await (const item of scan(root, undefined, byTime, r)) out.push(item);
  return out;
}

function random(seed: number) {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s / 0x7fffffff;
  };
}

describe('copy-on-write B+tree', () => {
  it('matches a sorted array under random inserts, replacements and removals across many plans', async () => {
    const rnd = random(42);
    const nodes = new MapNodes();
    let root: Root = null;
    const model = new Map<string, Item>();
    for (let plan = 0; plan < 120; plan++) {
      const ops = 1 + Math.floor(rnd() * 60);
      for (let i = 0; i < ops; i++) {
        const key = `k${Math.floor(rnd() * 3000)}`;
        const existing = model.get(key);
        if (existing && rnd() < 0.45) {
          root = await remove(root, existing, byTime, nodes);
          model.delete(key);
        } else {
          if (existing) root = await remove(root, existing, byTime, nodes);
          const item: Item = [Math.floor(rnd() * 500), key];
          root = await upsert(root, item, byTime, nodes);
          model.set(key, item);
        }
      }
      nodes.commit();
      const expected = [...model.values()].sort(byTime);
      expect(await all(root, nodes)).toEqual(expected);
      expect(await first(root, nodes)).toEqual(expected[0]);
      const from = expected[Math.floor(expected.length / 2)];
      if (from) {
        const tail: Item[] = [];
        for await (const item of scan(root, from, byTime, nodes, true)) tail.push(item);
        expect(tail).toEqual(expected.filter((e) => byTime(e, from) > 0));
      }
    }
    expect(nodes.latest.size).toBeLessThan(200);
    expect(nodes.versions.size).toBe(nodes.latest.size);
  });

  it('keeps one item per key in the key tree and updates its payload in place', async () => {
    const nodes = new MapNodes();
    let root: Root = null;
    for (let i = 0; i < 1000; i++)
      root = await upsert(root, [i, `key/${String(i % 400).padStart(4, '0')}`], byKey, nodes);
    nodes.commit();
    const items: Item[] = [];
    for await (const item of scan(root, [0, 'key/0100'], byKey, nodes)) {
      if (!item[1].startsWith('key/01')) break;
      items.push(item);
    }
    expect(items).toHaveLength(100);
    expect(items[0]).toEqual([900, 'key/0100']);
  });

  it('empties completely and frees every node', async () => {
    const nodes = new MapNodes();
    let root: Root = null;
    const items: Item[] = Array.from({ length: 2000 }, (_, i) => [i % 37, `x${i}`]);
    for (const item of items) root = await upsert(root, item, byTime, nodes);
    nodes.commit();
    for (const item of items) root = await remove(root, item, byTime, nodes);
    nodes.commit();
    expect(root).toBeNull();
    expect(nodes.latest.size).toBe(0);
    expect(nodes.versions.size).toBe(0);
  });
});
