/** One entry of a {@link TimeIndex}: a key at an instant (milliseconds since the epoch). */
export interface IndexEntry {
  time: number;
  key: string;
}

/**
 * Keys ordered by (time, key), as an array kept sorted: binary search to find a place, `splice` to insert
 * or remove. The due lookup is the first entries, `nextDueAt` the first one, and keyset paging starts
 * with a binary search. Inserting is O(n) element moves, which is fast in practice for the sizes an
 * example handles; a real adapter would use its store's ordered index (or a B-tree).
 */
export class TimeIndex {
  #entries: IndexEntry[] = [];

  get size(): number {
    return this.#entries.length;
  }

  /** Replaces the content at once (sorting once beats inserting one by one). */
  reset(entries: IndexEntry[] = []): void {
    this.#entries = entries.sort((a, b) => a.time - b.time || compareKeys(a.key, b.key));
  }

  add(time: number, key: string): void {
    this.#entries.splice(this.#search(time, key, true), 0, { time, key });
  }

  remove(time: number, key: string): void {
    const i = this.#search(time, key, true);
    const entry = this.#entries[i];
    if (entry && entry.time === time && entry.key === key) this.#entries.splice(i, 1);
  }

  first(): IndexEntry | undefined {
    return this.#entries[0];
  }

  /** Entries in order, strictly after `cursor` when given. */
  *after(cursor?: IndexEntry): Generator<IndexEntry> {
    const start = cursor ? this.#search(cursor.time, cursor.key, false) : 0;
    for (let i = start; i < this.#entries.length; i++) yield this.#entries[i] as IndexEntry;
  }

  /** The position of the first entry at or after (time, key), or strictly after it when not `inclusive`. */
  #search(time: number, key: string, inclusive: boolean): number {
    let low = 0;
    let high = this.#entries.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      const entry = this.#entries[mid] as IndexEntry;
      const order = entry.time - time || compareKeys(entry.key, key);
      if (order < 0 || (order === 0 && !inclusive)) low = mid + 1;
      else high = mid;
    }
    return low;
  }
}

/** Keys compare by UTF-16 code units, as JavaScript's `<` does (and as core's reference backend does). */
export function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
