import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { z } from 'zod';
import { notFound } from '../errors.ts';
import { formatCoins, MICRO_PER_COIN } from '../money/coins.ts';
import type { Mailer } from '../ports.ts';
import { lowBalanceMail, type AccountLinks } from './mails.ts';

/**
 * The low-balance notice (docs/accounts.md): "e-mail me when my balance falls below N coins".
 * The chat and settle paths do nothing for it: the `mas-low-balance` Schedule runs
 * `sendLowBalanceNotices` every minute, which mails each account whose spendable balance
 * (subscription + purchased) is below its threshold once per crossing.
 */
export const MAX_NOTICE_COINS = 1_000_000_000;

export const lowBalanceNoticeInput = z.object({
  /** Empty or absent: off. */
  threshold_coins: z
    .preprocess(
      (v) => (v === '' ? null : typeof v === 'string' && /^\s*\d{1,10}\s*$/.test(v) ? Number(v) : v),
      z
        .number({ error: 'must be a whole number of coins, such as 100, or empty to turn the notice off' })
        .int('must be a whole number of coins')
        .min(1, 'must be at least 1 coin')
        .max(MAX_NOTICE_COINS, `must be at most ${MAX_NOTICE_COINS} coins`)
        .nullable(),
    )
    .optional()
    .describe('mail the account when its balance falls below this many coins; empty turns the notice off'),
});

export const lowBalanceNoticeSchema = z
  .object({ object: z.literal('low_balance_notice'), threshold_coins: z.number().nullable(), notified: z.boolean() })
  .strict();

/** Sets (or, with no threshold, turns off) the account's notice; a new threshold starts a new crossing. */
export async function setLowBalanceNotice(em: EntityManager, accountId: string, input: z.output<typeof lowBalanceNoticeInput>): Promise<z.infer<typeof lowBalanceNoticeSchema>> {
  const coins = input.threshold_coins ?? null;
  const rows = await em.execute<{ id: string }[]>(
    'update accounts set low_balance_threshold_micro = ?, low_balance_notified_at = null where id = ? returning id',
    [coins === null ? null : (BigInt(coins) * MICRO_PER_COIN).toString(), accountId],
  );
  if (rows.length === 0) throw notFound('account_not_found', 'No such account.');
  return { object: 'low_balance_notice', threshold_coins: coins, notified: false };
}

/**
 * One run of the schedule. First the marks of accounts whose balance is back at or above their
 * threshold (or whose notice is off) are cleared, so the next crossing notifies again. Then each
 * account below its threshold and not yet marked is marked, in the statement that finds it
 * (`update … where low_balance_notified_at is null returning`): two runs at once (two workers)
 * cannot both claim one account, so each crossing is mailed once. A mail that fails clears its
 * mark again, and the next run tries again.
 */
export async function sendLowBalanceNotices(deps: { mailer: Mailer; logger: Logger; clock: () => Date; config: { links: AccountLinks } }, em: EntityManager): Promise<{ notified: number }> {
  await em.execute(
    `update accounts a set low_balance_notified_at = null
       from wallets w
      where w.account_id = a.id and a.low_balance_notified_at is not null
        and (a.low_balance_threshold_micro is null or w.subscription_micro + w.purchased_micro >= a.low_balance_threshold_micro)`,
  );
  const now = deps.clock();
  const claimed = await em.execute<{ id: string; email: string; balance: string; threshold: string }[]>(
    `update accounts a set low_balance_notified_at = ?
       from wallets w
      where w.account_id = a.id and a.low_balance_threshold_micro is not null and a.low_balance_notified_at is null
        and a.disabled_at is null and a.email_verified_at is not null
        and w.subscription_micro + w.purchased_micro < a.low_balance_threshold_micro
      returning a.id, a.email, (w.subscription_micro + w.purchased_micro)::text as balance, a.low_balance_threshold_micro::text as threshold`,
    [now],
  );
  let notified = 0;
  for (const row of claimed) {
    try {
      await deps.mailer.send(lowBalanceMail(row.email, { balance: formatCoins(BigInt(row.balance)), threshold: formatCoins(BigInt(row.threshold)), account: deps.config.links.account }));
      notified++;
    } catch (err) {
      deps.logger.error({ err: err instanceof Error ? { message: err.message, name: err.name } : String(err), account: row.id }, 'low-balance notice not sent; the next run tries again');
      await em.execute('update accounts set low_balance_notified_at = null where id = ? and low_balance_notified_at = ?', [row.id, now]);
    }
  }
  return { notified };
}
