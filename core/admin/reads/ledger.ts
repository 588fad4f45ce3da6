import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { coinsToJson } from '../../money/coins.ts';
import { LEDGER_KINDS } from '../../money/ledger.ts';
import { walletOwnerId } from './accounts.ts';
import { Conditions, iso, pageInput, pageOf, timeRangeInput } from './paging.ts';

export const ledgerListInput = pageInput.merge(timeRangeInput).extend({
  /** A person's account or an organization (`org_…`). */
  account: walletOwnerId.optional(),
  kind: z.enum(LEDGER_KINDS).optional(),
  pocket: z.enum(['subscription', 'purchased', 'held']).optional(),
  /** The job id, chat completion id or payment reference the entries were written for. */
  reference: z.string().trim().min(1).max(200).optional(),
  hold: z.string().trim().min(1).max(100).optional(),
  /** `le_<n>` of the last entry of the previous page: entries come newest first. */
  after: z.string().regex(/^le_\d{1,18}$/, 'must be an entry id such as le_123').optional(),
});

interface Row {
  id: string;
  account_id: string;
  pocket: 'subscription' | 'purchased' | 'held';
  kind: (typeof LEDGER_KINDS)[number];
  amount: string;
  after: string;
  reference: string;
  hold_id: string | null;
  description: string;
  created_at: Date | string;
}

/** Raw ledger entries, every pocket and kind, newest first (the customer reads the grouped history instead). */
export async function listLedger(em: EntityManager, input: z.output<typeof ledgerListInput>) {
  const where = new Conditions().range('e.created_at', input);
  where.addIf(input.account, 'e.account_id = ?').addIf(input.kind, 'e.kind = ?').addIf(input.pocket, 'e.pocket = ?');
  where.addIf(input.reference, 'e.reference = ?').addIf(input.hold, 'e.hold_id = ?');
  if (input.after) where.add('e.id < ?::bigint', input.after.slice(3));
  // Ordered by the bigint column: an output column id::text would sort as text.
  const rows = await em.execute<Row[]>(
    `select e.id::text as id, e.account_id, e.pocket, e.kind, e.amount_micro::text as amount, e.balance_after_micro::text as after,
            e.reference, e.hold_id, e.description, e.created_at
     from ledger_entries e ${where.sql()} order by e.id desc limit ?`,
    [...where.params, input.first + 1],
  );
  return pageOf(
    rows.map((r) => ({
      id: `le_${r.id}`,
      object: 'ledger_entry' as const,
      account: r.account_id,
      pocket: r.pocket,
      kind: r.kind,
      amount_coins: coinsToJson(BigInt(r.amount)),
      balance_after_coins: coinsToJson(BigInt(r.after)),
      reference: r.reference,
      hold_id: r.hold_id,
      description: r.description,
      created_at: iso(r.created_at)!,
    })),
    input.first,
  );
}
