/**
 * An item of a {@link DueHeap}: `due` is its key (epoch milliseconds, or any number); `heapIndex` is its
 * place in the heap, maintained by the heap: create items with `-1` (not in a heap), and do not change it.
 */
export interface HeapItem {
  due: number;
  heapIndex: number;
}

/**
 * A binary min-heap of items by `due`, earliest first: `peek`/`pop` give the next item due, `upsert`
 * inserts an item or moves it after its `due` changed, `remove` takes out any item. O(log n) each. Items
 * with the same `due` come out in no particular order.
 *
 * The calendar `Scheduler` keeps its declarations' next occurrences in one, so that a tick touches only
 * what is due; an adapter that keeps deadlines in memory (the NATS package's emulated message pump, say)
 * uses the same heap. An item is in at most one heap at a time (its `heapIndex` says where).
 */
export class DueHeap<T extends HeapItem> {
  readonly #items: T[] = [];

  get size(): number {
    return this.#items.length;
  }

  peek(): T | undefined {
    return this.#items[0];
  }

  clear(): void {
    for (const item of this.#items) item.heapIndex = -1;
    this.#items.length = 0;
  }

  /** Inserts `item`, or moves it after its `due` changed. */
  upsert(item: T): void {
    if (item.heapIndex < 0) {
      item.heapIndex = this.#items.length;
      this.#items.push(item);
      this.#up(item.heapIndex);
      return;
    }
    this.#up(item.heapIndex);
    this.#down(item.heapIndex);
  }

  pop(): T | undefined {
    const top = this.#items[0];
    if (!top) return undefined;
    this.remove(top);
    return top;
  }

  remove(item: T): void {
    const i = item.heapIndex;
    if (i < 0) return;
    const last = this.#items.pop() as T;
    item.heapIndex = -1;
    if (i === this.#items.length) return;
    this.#items[i] = last;
    last.heapIndex = i;
    this.#up(i);
    this.#down(i);
  }

  #less(a: number, b: number): boolean {
    return (this.#items[a] as T).due < (this.#items[b] as T).due;
  }

  #swap(a: number, b: number): void {
    const x = this.#items[a] as T;
    const y = this.#items[b] as T;
    this.#items[a] = y;
    this.#items[b] = x;
    x.heapIndex = b;
    y.heapIndex = a;
  }

  #up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#less(i, parent)) return;
      this.#swap(i, parent);
      i = parent;
    }
  }

  #down(i: number): void {
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let smallest = i;
      if (left < this.#items.length && this.#less(left, smallest)) smallest = left;
      if (right < this.#items.length && this.#less(right, smallest)) smallest = right;
      if (smallest === i) return;
      this.#swap(i, smallest);
      i = smallest;
    }
  }
}
