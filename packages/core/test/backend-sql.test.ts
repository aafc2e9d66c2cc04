import { describe, expect, it } from 'vitest';
import { refuseTransactionControl, transactionControl } from '../src/backend/sql.js';
import { InvalidArgumentError } from '../src/errors.js';

describe('transaction control on tx.sql', () => {
  it.each([
    ['BEGIN', 'BEGIN'],
    ['begin transaction isolation level serializable', 'BEGIN'],
    ['  \n\tStart   Transaction', 'START TRANSACTION'],
    ['COMMIT', 'COMMIT'],
    ["commit prepared 'x'", 'COMMIT'],
    ['END', 'END'],
    ['ROLLBACK', 'ROLLBACK'],
    ['rollback work', 'ROLLBACK'],
    ["ROLLBACK PREPARED 'x'", 'ROLLBACK'],
    ['ABORT', 'ABORT'],
    ["PREPARE TRANSACTION 'x'", 'PREPARE TRANSACTION'],
    ['-- a comment\nCOMMIT', 'COMMIT'],
    ['/* a\n comment */ begin;', 'BEGIN'],
    ['BEGIN IMMEDIATE', 'BEGIN'],
  ])('refuses %j', (text, verb) => {
    expect(transactionControl(text)).toBe(verb);
    expect(() => refuseTransactionControl(text)).toThrow(InvalidArgumentError);
  });

  it.each([
    'SAVEPOINT s1',
    'RELEASE SAVEPOINT s1',
    'release s1',
    'ROLLBACK TO SAVEPOINT s1',
    'rollback to s1',
    'ROLLBACK WORK TO SAVEPOINT s1',
    'ROLLBACK TRANSACTION TO s1',
    'SELECT 1',
    'INSERT INTO beginnings (id) VALUES (1)',
    'UPDATE t SET committed = true',
    'DO $$ BEGIN PERFORM 1; END $$',
    'ending',
  ])('lets %j through', (text) => {
    expect(transactionControl(text)).toBeUndefined();
    expect(() => refuseTransactionControl(text)).not.toThrow();
  });

  it('names the field and points to savepoints', () => {
    let caught: unknown;
    try {
      refuseTransactionControl('COMMIT');
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(InvalidArgumentError);
    expect((caught as InvalidArgumentError).field).toBe('tx.sql');
    expect((caught as Error).message).toMatch(/SAVEPOINT/);
  });
});
