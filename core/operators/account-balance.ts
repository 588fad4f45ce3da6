import type { EntityManager } from '@mikro-orm/postgresql';
import { resolveAccount } from '../accounts/accounts.ts';
import { balanceView, getBalance } from '../money/wallet.ts';

/** `balance`: the balance of the account named by id or email. */
export async function balanceOfAccount(em: EntityManager, ref: string) {
  const account = await resolveAccount(em, ref);
  return { account: account.id, ...balanceView(await getBalance(em, account.id)) };
}
