import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { newId } from '../ids.ts';
import { coinsToJson, parseCoins } from '../money/coins.ts';
import { balanceView, credit, getBalance, type CreditKind } from '../money/wallet.ts';
import { resolveWalletOwner, walletOwnerFields } from './wallet-owner.ts';

/** Coins as an operator types them: "100", "0.5". JSON numbers are read through their shortest decimal text. */
export const coinsAmount = z
  .union([z.string(), z.number()])
  .transform((v, ctx) => {
    try {
      return parseCoins(String(v));
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
      return z.NEVER;
    }
  })
  .refine((micro) => micro > 0n, 'must be more than 0');

export const creditCoinsInput = z.object({
  /** A person's account (id or e-mail), or `organization` (org_…): exactly one. */
  ...walletOwnerFields,
  coins: coinsAmount,
  /** Makes a repeated top-up (a retried payment webhook, a re-run script) count once. */
  idempotency_key: z.string().trim().min(1).max(200).optional(),
  reference: z.string().trim().min(1).max(200).optional(),
});

const DESCRIPTIONS: Record<CreditKind, string> = { topup: 'Top-up', subscription_grant: 'Subscription coins' };

/** A top-up (purchased coins) or a subscription grant, to a person's or an organization's wallet: both make the account paid. */
export async function creditCoins(em: EntityManager, kind: CreditKind, input: z.output<typeof creditCoinsInput>) {
  const account = await resolveWalletOwner(em, input);
  const reference = input.reference ?? newId('req');
  const result = await credit(em, {
    accountId: account.id,
    kind,
    amount: input.coins,
    reference,
    idempotencyKey: `${kind}:${account.id}:${input.idempotency_key ?? reference}`,
    description: DESCRIPTIONS[kind],
  });
  return {
    object: kind,
    account: account.id,
    coins: coinsToJson(input.coins),
    applied: result.applied,
    entry_id: `le_${result.entryId}`,
    balance: balanceView(await getBalance(em, account.id)),
  };
}
