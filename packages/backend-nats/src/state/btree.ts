/**
 * A copy-on-write B+tree whose nodes live in the state stream. Each node has a slot (a subject) and each
 * version of it is one message; a parent points at a child by slot and message sequence, so a version,
 * once written, never changes. A plan that modifies the tree writes new versions along the modified path
 * (old versions fall out of the stream by its two-messages-per-subject limit; nothing to purge). Readers
 * therefore traverse a consistent snapshot (the roots in one meta record) without locks, and may cache
 * versions by sequence forever.
 *
 * Items are `[time, key]` pairs. Time trees (due index, deadline index) order by time then key; the key
 * tree orders by key alone and carries the deadline as payload. Deletions remove empty nodes but do not
 * merge under-full ones: the height stays logarithmic in the number of items ever held at once.
 */

export type Item = [number, string];

/** A node version: its slot and the sequence of the message holding it (0: written by the plan being built). */
export type NodeRef = [slot: number, seq: number];

/** A tree: its root, or null when empty. */
export type Root = NodeRef | null;

export type TreeNode = { l: 1; i: Item[] } | { l: 0; s: Item[]; c: NodeRef[] };

export type Compare = (a: Item, b: Item) => number;

function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Orders by time, then key (due and deadline indexes). */
export const byTime: Compare = (a, b) => a[0] - b[0] || compareKeys(a[1], b[1]);
/** Orders by key alone (the key index; the time is payload). */
export const byKey: Compare = (a, b) => compareKeys(a[1], b[1]);

/** Reads nodes of a snapshot. */
export interface NodeReader {
  node(ref: NodeRef): Promise<TreeNode>;
}

/** Writes nodes during a plan. */
export interface NodeWriter extends NodeReader {
  /** A new, empty slot. */
  alloc(): NodeRef;
  /** Writes `node` as the new version of `ref`'s slot; returns the reference to that version. */
  write(ref: NodeRef, node: TreeNode): NodeRef;
  /** The slot leaves the tree. */
  drop(ref: NodeRef): void;
}

const MAX_ITEMS = 200;
const MAX_BYTES = 96 * 1024;

function itemBytes(item: Item): number {
  return item[1].length * 3 + 24;
}

function tooBig(items: Item[]): boolean {
  if (items.length > MAX_ITEMS) return true;
  let bytes = 0;
  for (const item of items) bytes += itemBytes(item);
  return bytes > MAX_BYTES && items.length > 1;
}

/** Index of the child of `node` whose range holds `item`. */
function childIndex(node: { s: Item[] }, item: Item, cmp: Compare): number {
  let lo = 1;
  let hi = node.s.length - 1;
  let found = 0;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cmp(node.s[mid] as Item, item) <= 0) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}

/** First index in sorted `items` whose item is >= `item`. */
function lowerBound(items: Item[], item: Item, cmp: Compare): number {
  let lo = 0;
  let hi = items.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cmp(items[mid] as Item, item) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

interface PathStep {
  ref: NodeRef;
  node: { l: 0; s: Item[]; c: NodeRef[] };
  index: number;
}

async function descend(
  root: NodeRef,
  item: Item,
  cmp: Compare,
  r: NodeReader,
): Promise<{ path: PathStep[]; leafRef: NodeRef; leaf: { l: 1; i: Item[] } }> {
  const path: PathStep[] = [];
  let ref = root;
  for (;;) {
    const node = await r.node(ref);
    if (node.l === 1) return { path, leafRef: ref, leaf: node };
    const index = childIndex(node, item, cmp);
    path.push({ ref, node, index });
    ref = node.c[index] as NodeRef;
  }
}

function fresh(w: NodeWriter, node: TreeNode): NodeRef {
  return w.write(w.alloc(), node);
}

/**
 * Inserts `item`, or replaces the item equal to it under `cmp` (the key tree's payload update). Returns
 * the new root id (`root` 0 is the empty tree).
 */
export async function upsert(root: Root, item: Item, cmp: Compare, w: NodeWriter): Promise<NodeRef> {
  if (root === null) return fresh(w, { l: 1, i: [item] });
  const { path, leafRef, leaf } = await descend(root, item, cmp, w);
  const items = leaf.i.slice();
  const at = lowerBound(items, item, cmp);
  if (at < items.length && cmp(items[at] as Item, item) === 0) items[at] = item;
  else items.splice(at, 0, item);
  // What replaces the current node in its parent: one id, or two ids and the right one's lower bound.
  let left: NodeRef;
  let right: { ref: NodeRef; low: Item } | undefined;
  if (tooBig(items)) {
    const half = items.length >> 1;
    left = w.write(leafRef, { l: 1, i: items.slice(0, half) });
    const rightItems = items.slice(half);
    right = { ref: fresh(w, { l: 1, i: rightItems }), low: rightItems[0] as Item };
  } else left = w.write(leafRef, { l: 1, i: items });
  for (let depth = path.length - 1; depth >= 0; depth--) {
    const step = path[depth] as PathStep;
    const s = step.node.s.slice();
    const c = step.node.c.slice();
    c[step.index] = left;
    if (right) {
      s.splice(step.index + 1, 0, right.low);
      c.splice(step.index + 1, 0, right.ref);
    }
    right = undefined;
    if (c.length > MAX_ITEMS) {
      const half = c.length >> 1;
      left = w.write(step.ref, { l: 0, s: s.slice(0, half), c: c.slice(0, half) });
      const rightS = s.slice(half);
      right = { ref: fresh(w, { l: 0, s: rightS, c: c.slice(half) }), low: rightS[0] as Item };
    } else left = w.write(step.ref, { l: 0, s, c });
  }
  if (right) {
    const leftLow = (path.length > 0 ? (path[0] as PathStep).node.s[0] : leaf.i[0]) ?? right.low;
    return fresh(w, { l: 0, s: [leftLow, right.low], c: [left, right.ref] });
  }
  return left;
}

/** Removes the item equal to `item` under `cmp`, if present. Returns the new root (0 when empty). */
export async function remove(root: Root, item: Item, cmp: Compare, w: NodeWriter): Promise<Root> {
  if (root === null) return null;
  const { path, leafRef, leaf } = await descend(root, item, cmp, w);
  const at = lowerBound(leaf.i, item, cmp);
  if (at >= leaf.i.length || cmp(leaf.i[at] as Item, item) !== 0) return root;
  const items = leaf.i.slice();
  items.splice(at, 1);
  // `replacement` is the new id of the current node, or undefined when it disappeared.
  let replacement: NodeRef | undefined;
  if (items.length === 0) {
    w.drop(leafRef);
    replacement = undefined;
  } else replacement = w.write(leafRef, { l: 1, i: items });
  for (let depth = path.length - 1; depth >= 0; depth--) {
    const step = path[depth] as PathStep;
    const s = step.node.s.slice();
    const c = step.node.c.slice();
    if (replacement === undefined) {
      s.splice(step.index, 1);
      c.splice(step.index, 1);
    } else c[step.index] = replacement;
    if (c.length === 0) {
      w.drop(step.ref);
      replacement = undefined;
    } else replacement = w.write(step.ref, { l: 0, s, c });
  }
  if (replacement === undefined) return null;
  // A root with a single child is replaced by that child.
  let top = replacement;
  for (;;) {
    const node = await w.node(top);
    if (node.l === 1 || node.c.length !== 1) return top;
    w.drop(top);
    top = node.c[0] as NodeRef;
  }
}

/**
 * Items in order, starting at the first item >= `from` (or strictly after it when `exclusive`), from the
 * beginning when `from` is undefined.
 */
export async function* scan(
  root: Root,
  from: Item | undefined,
  cmp: Compare,
  r: NodeReader,
  exclusive = false,
): AsyncGenerator<Item> {
  if (root === null) return;
  const stack: { node: { l: 0; s: Item[]; c: NodeRef[] }; index: number }[] = [];
  let ref = root;
  // Descend to the leaf that holds `from`, remembering where to continue in each ancestor.
  for (;;) {
    const node = await r.node(ref);
    if (node.l === 1) {
      let at = from === undefined ? 0 : lowerBound(node.i, from, cmp);
      if (exclusive && from !== undefined)
        while (at < node.i.length && cmp(node.i[at] as Item, from) === 0) at++;
      for (; at < node.i.length; at++) yield node.i[at] as Item;
      break;
    }
    const index = from === undefined ? 0 : childIndex(node, from, cmp);
    stack.push({ node, index });
    ref = node.c[index] as NodeRef;
  }
  // Then walk the following leaves in order.
  while (stack.length > 0) {
    const top = stack[stack.length - 1] as { node: { l: 0; s: Item[]; c: NodeRef[] }; index: number };
    top.index++;
    if (top.index >= top.node.c.length) {
      stack.pop();
      continue;
    }
    let child = await r.node(top.node.c[top.index] as NodeRef);
    while (child.l === 0) {
      stack.push({ node: child, index: 0 });
      child = await r.node(child.c[0] as NodeRef);
    }
    for (const item of child.i) {
      if (from !== undefined && (exclusive ? cmp(item, from) <= 0 : cmp(item, from) < 0)) continue;
      yield item;
    }
  }
}

/** The first item, or undefined for an empty tree. */
export async function first(root: Root, r: NodeReader): Promise<Item | undefined> {
  if (root === null) return undefined;
  let node = await r.node(root);
  while (node.l === 0) node = await r.node(node.c[0] as NodeRef);
  return node.i[0];
}
