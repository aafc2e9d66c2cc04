/**
 * Literal prefix matching as an index range. In UTF-8 byte order (SQLite's BINARY collation on a UTF-8
 * database), the strings that start with `prefix` are exactly those `>= prefix` and `< upper`, where
 * `upper` is `prefix` with its last code point incremented. No LIKE or GLOB: `%`, `_`, `*` and `\` in a
 * prefix are plain characters.
 *
 * Returns `undefined` when there is no such bound: the prefix is empty or made only of U+10FFFF (then the
 * caller compares `substr(key, 1, length(prefix))` instead).
 */
export function prefixUpperBound(prefix: string): string | undefined {
  const points = Array.from(prefix);
  while (points.length > 0) {
    const last = points.pop()?.codePointAt(0) ?? 0;
    if (last < 0x10ffff) {
      // Surrogate code points are not characters and never appear in valid keys: skip over them.
      const next = last + 1 === 0xd800 ? 0xe000 : last + 1;
      points.push(String.fromCodePoint(next));
      return points.join('');
    }
  }
  return undefined;
}
