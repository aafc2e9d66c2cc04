import { describe, expect, it } from 'vitest';
import { DueHeap, type HeapItem } from '../../src/index.js';

interface Item extends HeapItem {
  name: string;
}

const item = (name: string, due: number): Item => ({ name, due, heapIndex: -1 });

function drain(heap: DueHeap<Item>): number[] {
  const out: number[] = [];
  for (let top = heap.pop(); top; top = heap.pop()) out.push(top.due);
  return out;
}

describe('DueHeap (exported from @duetime/core)', () => {
  it('pops items earliest due first, whatever the order they went in', () => {
    const heap = new DueHeap<Item>();
    const dues = Array.from({ length: 500 }, (_, i) => (i * 7919) % 1000);
    for (const [i, due] of dues.entries()) heap.upsert(item(`i${i}`, due));
    expect(heap.size).toBe(500);
    expect(heap.peek()?.due).toBe(0);
    expect(drain(heap)).toEqual([...dues].sort((a, b) => a - b));
    expect(heap.size).toBe(0);
    expect(heap.pop()).toBeUndefined();
  });

  it('moves an item whose due changed, removes any item, and marks items outside with -1', () => {
    const heap = new DueHeap<Item>();
    const a = item('a', 10);
    const b = item('b', 20);
    const c = item('c', 30);
    for (const x of [a, b, c]) heap.upsert(x);
    c.due = 5;
    heap.upsert(c);
    expect(heap.peek()).toBe(c);
    heap.remove(a);
    expect(a.heapIndex).toBe(-1);
    heap.remove(a); // not in the heap: nothing happens
    expect(heap.size).toBe(2);
    const popped = heap.pop();
    expect(popped).toBe(c);
    expect(c.heapIndex).toBe(-1);
    heap.upsert(c); // a popped item goes back in
    heap.clear();
    expect(heap.size).toBe(0);
    expect([b.heapIndex, c.heapIndex]).toEqual([-1, -1]);
  });
});
