import type { EntityManager } from '@mikro-orm/postgresql';
import { describe, expect, it } from 'vitest';
import { describeRows, WELCOME_CREDIT_REFERENCE } from '../../core/money/history-details.ts';

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

describe('a Responses API charge in the history', () => {
  // A store of records that answers, as the real query does, only the references it is asked for.
  const record = (ref: string) => ({ src: 'chat', ref, model: 'demo/chat', model_type: 'text', record_kind: 'response', input_tokens: 12, output_tokens: 34, key_id: 'key_1', status: null, price: null, cost: null, amount_cents: null, currency: null, source: null });
  const store = (refs: string[]) =>
    ({
      execute: (_sql: string, params: unknown[]) => {
        const asked = String(params[1]).replace(/^\{|\}$/g, '').split(',').map((r) => r.replace(/^"|"$/g, ''));
        return Promise.resolve(refs.filter((r) => asked.includes(r)).map(record));
      },
    }) as unknown as EntityManager;
  const row = (anchor: bigint, type: 'api_usage' | 'topup', reference: string) => ({ anchor, type, entryKind: type === 'topup' ? 'topup' : 'capture', holdKind: type === 'topup' ? null : 'chat', description: 'Top-up', amount: 5n, reference });

  it('is described by the record kept under its response id (resp_…), found from the chat completion it ran (chatcmpl-…)', async () => {
    // The charge's reference is the chat completion's id; the record is kept under the response's own id.
    const details = await describeRows(store(['resp_abc']), 'acct_1', [row(7n, 'api_usage', 'chatcmpl-abc')]);
    expect(details.get(7n)).toMatchObject({ model: 'demo/chat', input_tokens: 12, output_tokens: 34, key_id: 'key_1', details: 'Response on demo/chat: 12 input + 34 output tokens' });
  });

  it('pairs only a chat completion id with a response: another reference is never read as a response', async () => {
    // A top-up whose reference ends as the response's id does after the chat completion prefix's length.
    const details = await describeRows(store(['resp_abc']), 'acct_1', [row(7n, 'api_usage', 'chatcmpl-abc'), row(8n, 'topup', 'pi_000000abc')]);
    expect(details.get(7n)?.details).toMatch(/^Response on demo\/chat/);
    expect(details.get(8n)?.model).toBeNull();
    expect(details.get(8n)?.details).not.toMatch(/^Response/);
  });
});

describe('the welcome credit in the history', () => {
  const noRecords = { execute: () => Promise.resolve([]) } as unknown as EntityManager;
  const row = (anchor: bigint, reference: string, description: string) => ({ anchor, type: 'adjustment' as const, entryKind: 'adjustment', holdKind: null, description, amount: 1000_000_000n, reference });

  it('reads "Welcome credit"; an operator\'s correction still reads as one', async () => {
    const details = await describeRows(noRecords, 'acct_1', [row(1n, WELCOME_CREDIT_REFERENCE, 'Welcome credit'), row(2n, 'adj_k1', 'Balance adjustment')]);
    expect(details.get(1n)?.details).toBe('Welcome credit');
    expect(details.get(2n)?.details).toBe('Balance correction by the operator (up)');
  });
});
