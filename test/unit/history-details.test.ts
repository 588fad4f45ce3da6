import type { EntityManager } from '@mikro-orm/postgresql';
import { describe, expect, it } from 'vitest';
import { describeRows } from '../../core/money/history-details.ts';

/**
 * The history in words (core/money/history-details.ts) where no database is needed; the words
 * of each kind of row are read against a real ledger in test/integration/account-usage.test.ts.
 */
describe('the history in words, without a database', () => {
  it('describes an empty page without a statement', async () => {
    // An empty page (an account's first look, a page past the last row) costs no round trip.
    const noDatabase = { execute: () => Promise.reject(new Error('no statement was expected')) } as unknown as EntityManager;
    expect(await describeRows(noDatabase, 'acct_1', [])).toEqual(new Map());
  });
});
