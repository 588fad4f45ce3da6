import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { coinsSchema } from '../views.ts';
import { CoreError, notFound } from '../errors.ts';
import { coinsToJson, type Micro } from './coins.ts';

export type Pocket = 'subscription' | 'purchased' | 'held';

export interface Balance {
  subscription: Micro;
  purchased: Micro;
  held: Micro;
  paid: boolean;
}

export async function getBalance(em: EntityManager, accountId: string): Promise<Balance> {
  const rows = await em.execute<{ s: string; p: string; h: string; paid: boolean }[]>(
    `select w.subscription_micro::text as s, w.purchased_micro::text as p, w.held_micro::text as h, a.paid
     from wallets w join accounts a on a.id = w.account_id where w.account_id = ?`,
    [accountId],
  );
  const row = rows[0];
  if (!row) throw notFound('account_not_found', `No account ${accountId}.`);
  return { subscription: BigInt(row.s), purchased: BigInt(row.p), held: BigInt(row.h), paid: row.paid };
}

export const balanceSchema = z
  .object({
    object: z.literal('balance'),
    coins: coinsSchema.describe('what can be spent now: subscription + purchased'),
    subscription_coins: coinsSchema,
    purchased_coins: coinsSchema,
    held_coins: coinsSchema.describe('what open reservations hold'),
    paid_account: z.boolean().describe('true after a first top-up or subscription'),
  })
  .strict();

/** The balance object, with the same field names wherever a balance appears (REST, CLI, MCP, admin). */
export function balanceView(b: Balance): z.infer<typeof balanceSchema> {
  return {
    object: 'balance' as const,
    coins: coinsToJson(b.subscription + b.purchased),
    subscription_coins: coinsToJson(b.subscription),
    purchased_coins: coinsToJson(b.purchased),
    held_coins: coinsToJson(b.held),
    paid_account: b.paid,
  };
}

export type CreditKind = 'topup' | 'subscription_grant';

export interface CreditResult {
  entryId: string;
  /** False when the idempotency key had been used: the first credit stands and nothing moved. */
  applied: boolean;
}

/**
 * Adds coins to a spendable pocket: a top-up goes to `purchased`, a subscription grant to
 * `subscription`. Either makes the account paid. Repeating an idempotency key moves nothing.
 */
export async function credit(
  em: EntityManager,
  input: { accountId: string; kind: CreditKind; amount: Micro; reference: string; idempotencyKey: string; description: string },
): Promise<CreditResult> {
  if (input.amount <= 0n) throw new CoreError('invalid_request', 'The amount must be more than 0 coins.', { param: 'coins' });
  const pocket: Pocket = input.kind === 'topup' ? 'purchased' : 'subscription';
  const rows = await em.execute<{ status: string; entry_id: string | null }[]>(
    'select status, entry_id::text from mas_credit(?, ?, ?, ?::bigint, ?, ?, ?)',
    [input.accountId, pocket, input.kind, input.amount.toString(), input.reference, input.idempotencyKey, input.description],
  );
  const row = rows[0]!;
  if (row.status === 'no_wallet') throw notFound('account_not_found', `No account ${input.accountId}.`);
  return { entryId: row.entry_id!, applied: row.status === 'credited' };
}

