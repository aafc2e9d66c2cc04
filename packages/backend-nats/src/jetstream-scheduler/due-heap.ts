/** A pending definition as the pump tracks it: only what is needed to find it again when it falls due. */
export interface DueEntry {
  /** When to look at it (epoch ms): its due instant, or a retry time after a failure. */
  at: number;
  /** The definition's stream sequence. */
  seq: number;
  kind: 'once' | 'cron';
}

/** A binary min-heap of {@link DueEntry} ordered by `at`, then `seq`. */
export class DueHeap {
  readonly #items: DueEntry[] = [];

  get size(): number {
    return this.#items.length;
  }

  peek(): DueEntry | undefined {
    return this.#items[0];
  }

  push(entry: DueEntry): void {
    const items = this.#items;
    items.push(entry);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(items[i] as DueEntry, items[parent] as DueEntry)) break;
      [items[i], items[parent]] = [items[parent] as DueEntry, items[i] as DueEntry];
      i = parent;
    }
  }

  pop(): DueEntry | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < items.length && before(items[l] as DueEntry, items[m] as DueEntry)) m = l;
        if (r < items.length && before(items[r] as DueEntry, items[m] as DueEntry)) m = r;
        if (m === i) break;
        [items[i], items[m]] = [items[m] as DueEntry, items[i] as DueEntry];
        i = m;
      }
    }
    return top;
  }

  clear(): void {
    this.#items.length = 0;
  }
}

function before(a: DueEntry, b: DueEntry): boolean {
  return a.at < b.at || (a.at === b.at && a.seq < b.seq);
}
