import type { EntityManager } from '@mikro-orm/postgresql';
import { notFound } from '../errors.ts';
import { balanceView, getBalance } from '../money/wallet.ts';
import { Account } from './account.entity.ts';
import { accountView } from './accounts.ts';

/** A person's own account with its balance, as the account pages show it. */
export async function accountOverview(em: EntityManager, accountId: string) {
  const account = await em.findOne(Account, { id: accountId }, { refresh: true });
  if (!account) throw notFound('account_not_found', 'No such account.');
  return { ...accountView(account), balance: balanceView(await getBalance(em, accountId)) };
}
