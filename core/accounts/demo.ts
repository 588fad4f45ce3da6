import type { EntityManager } from '@mikro-orm/postgresql';
import { isCoreError } from '../errors.ts';
import { createLoginToken } from '../auth/login-links.ts';
import { createKey } from '../keys/keys.ts';
import { credit } from '../money/wallet.ts';
import { createAccount } from './accounts.ts';
import type { Micro } from '../money/coins.ts';

export const DEMO_EMAIL = 'demo@example.com';

/**
 * On the very first start (no account at all) create a demo account with demo coins, one key
 * and a one-time sign-in link, and return the key and the link's token so the caller can show
 * them once. Several instances starting together
 * on an empty database race on the unique email: only the winner gets a key back.
 */
export async function ensureDemoAccount(em: EntityManager, demoCoins: Micro, now = new Date()): Promise<{ accountId: string; key: string; loginToken: string } | null> {
  const any = await em.execute('select 1 from accounts limit 1');
  if (any.length > 0) return null;
  let accountId: string;
  try {
    accountId = (await createAccount(em, { email: DEMO_EMAIL })).id;
  } catch (err) {
    if (isCoreError(err) && err.code === 'conflict') return null;
    throw err;
  }
  if (demoCoins > 0n) {
    await credit(em, {
      accountId,
      kind: 'topup',
      amount: demoCoins,
      reference: 'demo',
      idempotencyKey: `demo:${accountId}`,
      description: 'Demo coins',
    });
  }
  const key = await createKey(em, accountId, { name: 'Demo key' });
  // The demo account has no password: a one-time link signs its owner in to the account pages.
  const link = await createLoginToken(em, accountId, now);
  return { accountId, key: key.key, loginToken: link.token };
}
