import type { EntityManager } from '@mikro-orm/postgresql';
import { notFound } from '../errors.ts';
import { formatCoins } from '../money/coins.ts';
import { balanceView, getBalance } from '../money/wallet.ts';
import { Account } from './account.entity.ts';
import { accountView } from './accounts.ts';

/** A person's own account with its balance, as the account pages show it. */
export async function accountOverview(em: EntityManager, accountId: string) {
  const account = await em.findOne(Account, { id: accountId }, { refresh: true });
  if (!account) throw notFound('account_not_found', 'No such account.');
  const [extra] = await em.execute<{ email_verified_at: Date | null; low_balance_threshold_micro: string | null }[]>(
    'select email_verified_at, low_balance_threshold_micro::text as low_balance_threshold_micro from accounts where id = ?',
    [accountId],
  );
  return {
    ...accountView(account),
    /** False until the person followed the link mailed at sign-up: keys and payments wait for it. */
    email_verified: extra?.email_verified_at != null,
    /** The low-balance notice's threshold in coins, null when off. */
    low_balance_threshold_coins: extra?.low_balance_threshold_micro ? formatCoins(BigInt(extra.low_balance_threshold_micro)) : null,
    balance: balanceView(await getBalance(em, accountId)),
  };
}
