import { describe, expect, it } from 'vitest';
import type { Timeline } from '../../src/calendar/decide/admission.js';
import { CursorBook, newTrack, resetTrack } from '../../src/calendar/decide/cursor-book.js';
import { every } from '../../src/index.js';
import type { CursorBackend } from '../../src/lease/types.js';
import { silentLogger } from '../../src/logger.js';

/** A cursor backend that keeps the maximum, like every real one. */
function memoryCursors(): CursorBackend & { value: number | undefined } {
  return {
    value: undefined,
    async read() {
      return this.value === undefined ? undefined : new Date(this.value);
    },
    async advance(_key, at) {
      this.value = Math.max(this.value ?? at.getTime(), at.getTime());
      return new Date(this.value);
    },
  };
}

function track() {
  const declaration = every('job', 1000, () => undefined);
  return newTrack(declaration, {} as Timeline, 'cursor/job', true);
}

describe('CursorBook', () => {
  it('moves the cursor over finished occurrences only once everything admitted before them finished', async () => {
    const cursors = memoryCursors();
    const book = new CursorBook(cursors, 60_000, silentLogger);
    const t = track();
    resetTrack(t, 1);
    await book.load(t);
    for (const at of [1000, 2000, 3000]) book.admitted(t, at);
    book.finished(t, 2000, true);
    await book.settle();
    expect(cursors.value).toBeUndefined();
    book.finished(t, 1000, true);
    await book.settle();
    expect(cursors.value).toBe(2000);
    book.finished(t, 3000, true);
    await book.settle();
    expect(cursors.value).toBe(3000);
  });

  it('never carries the cursor past an occurrence cancelled in this epoch, whatever finishes after it', async () => {
    const cursors = memoryCursors();
    const book = new CursorBook(cursors, 60_000, silentLogger);
    const t = track();
    resetTrack(t, 1);
    await book.load(t);
    for (const at of [1000, 2000, 3000, 4000]) book.admitted(t, at);
    book.finished(t, 1000, true);
    // Leadership is lost: 2000 and 3000 are cancelled; 4000 had started and still succeeds.
    book.finished(t, 2000, false);
    book.finished(t, 3000, false);
    book.finished(t, 4000, true);
    book.skipped(t, 5000);
    await book.settle();
    expect(cursors.value).toBe(1000);
    // The next epoch re-reads the cursor and decides 2000 again.
    resetTrack(t, 2);
    await book.load(t);
    expect(t.decidedThrough).toBe(1000);
    book.admitted(t, 2000);
    book.finished(t, 2000, true);
    await book.settle();
    expect(cursors.value).toBe(2000);
  });
});
