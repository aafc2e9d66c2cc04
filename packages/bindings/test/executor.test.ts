import { InvalidArgumentError } from '@duetime/core';
import { describe, expect, it } from 'vitest';
import { arraysAsLiterals, questionMarks } from '../src/executor.js';

// The executor contract on each library's transaction is part of the binding conformance group
// (conformance.test.ts); these are the helpers bindings build on.

describe('questionMarks (Knex)', () => {
  it('rewrites $n in order of appearance, repeating reused parameters and escaping literal ?', () => {
    expect(questionMarks("SELECT $2, $1, $2, '?'", ['a', 'b'])).toEqual({
      text: "SELECT ?, ?, ?, '\\?'",
      bindings: ['b', 'a', 'b'],
    });
    expect(() => questionMarks('SELECT $3', [1])).toThrow(InvalidArgumentError);
  });
});

describe('arraysAsLiterals (postgres.js, Drizzle)', () => {
  it('writes arrays as PostgreSQL array literals, quoting and escaping text, leaving other values alone', () => {
    expect(arraysAsLiterals([['a', 'b"c', 'd\\e', null], [1, 2n, true], 'x', 5])).toEqual([
      '{"a","b\\"c","d\\\\e",NULL}',
      '{1,2,true}',
      'x',
      5,
    ]);
  });
});
