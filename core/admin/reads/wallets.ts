import type { EntityManager } from '@mikro-orm/postgresql';
import { balanceView } from '../../money/wallet.ts';
import { textArray } from './paging.ts';

/** The wallets of these accounts, in one query (a dataloader's batch): the balance object with its account. */
export async function walletsByAccountIds(em: EntityManager, accountIds: string[]) {
  if (accountIds.length === 0) return { object: 'list' as const, data: [] };
  const rows = await em.execute<{ account_id: string; s: string; p: string; h: string; paid: boolean }[]>(
    `select w.account_id, w.subscription_micro::text as s, w.purchased_micro::text as p, w.held_micro::text as h, a.paid
     from wallets w join accounts a on a.id = w.account_id where w.account_id = any(?::text[])`,
    [textArray(accountIds)],
  );
  return {
    object: 'list' as const,
    data: rows.map((r) => ({ account: r.account_id, ...balanceView({ subscription: BigInt(r.s), purchased: BigInt(r.p), held: BigInt(r.h), paid: r.paid }) })),
  };
}
