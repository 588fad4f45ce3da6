import type { EntityManager } from '@mikro-orm/postgresql';
import type { z } from 'zod';
import { coinsToJson } from './coins.ts';
import { historyInput, parseCursor } from './history.ts';

/**
 * Every kind of entry the ledger writes (its check constraint, ledger_entries_kind_check):
 * adapters that name kinds (the GraphQL admin's LedgerKind) take this list, and a test walks each
 * one through them.
 */
export const LEDGER_KINDS = ['topup', 'subscription_grant', 'reservation', 'capture', 'release', 'adjustment', 'refund', 'payment_reversal'] as const;
export type LedgerKind = (typeof LEDGER_KINDS)[number];

interface LedgerRow {
  entry_id: string;
  pocket: string;
  kind: string;
  amount: string;
  after: string;
  reference: string;
  hold_id: string | null;
  description: string;
  created_at: Date | string;
}

/**
 * The raw ledger of an account, every entry, newest first, paged like the history (`limit`,
 * `starting_after=le_N` for the entries below N). For audit and a later admin API; no customer
 * route exposes it: customers read `listHistory`.
 */
export async function listLedgerEntries(em: EntityManager, accountId: string, input: z.output<typeof historyInput>) {
  const cursor = parseCursor(input.starting_after);
  // Ordered by the bigint column itself: an output column of the same name (id::text) would
  // sort as text, le_99 after le_686.
  const rows = await em.execute<LedgerRow[]>(
    `select e.id::text as entry_id, e.pocket, e.kind, e.amount_micro::text as amount, e.balance_after_micro::text as after,
            e.reference, e.hold_id, e.description, e.created_at
     from ledger_entries e
     where e.account_id = ? and e.id < ?::bigint
     order by e.id desc limit ?`,
    [accountId, (cursor ?? 9_223_372_036_854_775_807n).toString(), input.limit + 1],
  );
  return {
    object: 'list' as const,
    data: rows.slice(0, input.limit).map((row) => ({
      id: `le_${row.entry_id}`,
      object: 'ledger_entry' as const,
      type: row.kind,
      description: row.description,
      pocket: row.pocket,
      amount_coins: coinsToJson(BigInt(row.amount)),
      balance_after_coins: coinsToJson(BigInt(row.after)),
      reference: row.reference,
      hold: row.hold_id,
      created_at: new Date(row.created_at).toISOString(),
    })),
    has_more: rows.length > input.limit,
  };
}
