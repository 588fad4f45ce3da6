import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { invalid } from '../errors.ts';
import { coinsToJson } from './coins.ts';

export const historyInput = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  /** The id of the last entry of the previous page; entries come newest first. */
  starting_after: z.string().regex(/^le_\d{1,19}$/, 'must be an entry id such as le_123').optional(),
});
export type HistoryInput = z.input<typeof historyInput>;

interface EntryRow {
  id: string;
  pocket: string;
  kind: string;
  amount: string;
  after: string;
  reference: string;
  description: string;
  created_at: Date;
}

/** The ledger as the account sees it, newest first, with Stripe-style cursor paging. */
export async function listHistory(em: EntityManager, accountId: string, input: z.output<typeof historyInput>) {
  const cursor = input.starting_after ? BigInt(input.starting_after.slice(3)) : null;
  if (cursor !== null && cursor > 9_223_372_036_854_775_807n) throw invalid('starting_after', 'starting_after is not an entry id.');
  const rows = await em.execute<EntryRow[]>(
    `select id::text, pocket, kind, amount_micro::text as amount, balance_after_micro::text as after,
            reference, description, created_at
     from ledger_entries
     where account_id = ? and (?::bigint is null or id < ?::bigint)
     order by id desc limit ?`,
    [accountId, cursor?.toString() ?? null, cursor?.toString() ?? null, input.limit + 1],
  );
  const page = rows.slice(0, input.limit);
  return {
    object: 'list' as const,
    data: page.map(entryView),
    has_more: rows.length > input.limit,
  };
}

function entryView(row: EntryRow) {
  return {
    id: `le_${row.id}`,
    object: 'wallet_entry' as const,
    type: row.kind,
    description: row.description,
    pocket: row.pocket,
    amount_coins: coinsToJson(BigInt(row.amount)),
    balance_after_coins: coinsToJson(BigInt(row.after)),
    reference: row.reference,
    created_at: new Date(row.created_at).toISOString(),
  };
}
