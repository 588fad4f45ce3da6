import { createHash, randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { CoreDeps } from '../context.ts';
import { invalid } from '../errors.ts';
import { idempotencyKeySchema } from '../idempotency.ts';
import { COINS_PER_CENT, formatUsd, parseUsdCents } from './amounts.ts';
import { stripeFieldsOf, withOrganization, type Payer } from './payer.ts';
import { paymentProvider, providerFailure } from './setup.ts';

const USD_AMOUNT = 'must be an amount in US dollars with at most 2 decimals, such as 12.50';

/** A dollar amount, in cents: "12.34" or 12.34 is 1234. */
export const usdAmount = z
    // The document says what a dollar amount looks like; the operator's minimum and maximum
    // (TOPUP_MIN_USD, TOPUP_MAX_USD) are checked after, naming the field.
    .union([z.number().positive(USD_AMOUNT), z.string().regex(/^\s*\d{1,9}(\.\d{1,2})?\s*$/, USD_AMOUNT)])
    .describe('US dollars, at most 2 decimals (12.34); 1 USD buys 1000 coins, 1 cent 10')
    .transform((v, ctx) => {
      const cents = parseUsdCents(v);
      if (cents !== null && cents > 0) return cents;
      ctx.addIssue({ code: 'custom', message: USD_AMOUNT });
      return z.NEVER;
    });

export const topUpCheckoutInput = z.object({
  amount_usd: usdAmount,
  /** Makes a retried request return the first Checkout Session. */
  idempotency_key: idempotencyKeySchema.optional(),
});

export const checkoutSessionSchema = z
  .object({
    object: z.literal('checkout_session'),
    id: z.string().describe("the payment provider's id of the session (Stripe: cs_…)"),
    url: z.string().describe('the payment page: send the customer there; the coins are added when the payment arrives, not when the customer comes back'),
  })
  .strict();

/** A top-up's amount within the operator's minimum and maximum (TOPUP_MIN_USD, TOPUP_MAX_USD), or a 400 naming `amount_usd`. */
export function checkTopUpAmount(bounds: { topUpMinCents: number; topUpMaxCents: number }, cents: number): number {
  if (cents < bounds.topUpMinCents) throw invalid('amount_usd', `The amount must be at least ${formatUsd(bounds.topUpMinCents)} USD.`, 'amount_too_small');
  if (cents > bounds.topUpMaxCents) throw invalid('amount_usd', `The amount must be at most ${formatUsd(bounds.topUpMaxCents)} USD.`, 'amount_too_large');
  return cents;
}

/**
 * A payment page (Stripe Checkout, payment mode) for a top-up of `amount_usd`. Nothing is
 * credited here or on the customer's return: the coins come with the payment's webhook
 * (receive-webhook.ts). The minimum and maximum are the operator's (TOPUP_MIN_USD, TOPUP_MAX_USD).
 * The payer's wallet is the caller's or an organization's they own (payer.ts).
 */
export async function createTopUpCheckout(
  deps: Pick<CoreDeps, 'payments' | 'config' | 'logger'>,
  em: EntityManager,
  payer: Payer,
  input: z.output<typeof topUpCheckoutInput>,
): Promise<z.infer<typeof checkoutSessionSchema>> {
  const cents = checkTopUpAmount(deps.config.payments, input.amount_usd);
  return startTopUpCheckout(deps, em, payer.accountId, cents, { idempotencyKey: input.idempotency_key, purpose: 'topup', payer });
}

/**
 * A Checkout Session for a top-up of `cents` (already within the operator's bounds): the one
 * that "Add credits" makes, and the one auto top-up makes to save the card (`saveCard`). A
 * client's idempotency key is scoped to the account and hashed (Stripe's keys are at most 255
 * characters); without one, a fresh key per request. An organization's session names it in
 * Stripe's metadata, with the owner acting, and makes the organization its own customer (its
 * billing address); its return URLs lead back to the organization's billing page.
 */
export async function startTopUpCheckout(
  deps: Pick<CoreDeps, 'payments' | 'config' | 'logger'>,
  em: EntityManager,
  accountId: string,
  cents: number,
  opts: { idempotencyKey?: string | undefined; purpose: 'topup' | 'autotopup-setup'; saveCard?: boolean; payer?: Payer },
): Promise<z.infer<typeof checkoutSessionSchema>> {
  const provider = paymentProvider(deps);
  const { currency, returnUrls } = deps.config.payments;
  // The customer of an earlier payment: the payment page then knows them.
  const [earlier] = await em.execute<{ customer_id: string }[]>(
    'select customer_id from payments where account_id = ? and customer_id is not null order by created_at desc limit 1',
    [accountId],
  );
  const key = opts.idempotencyKey ? createHash('sha256').update(opts.idempotencyKey).digest('base64url') : randomUUID();
  const coins = `${(BigInt(cents) * COINS_PER_CENT).toLocaleString('en-US')} coins`;
  const organizationId = opts.payer?.organizationId ?? null;
  const fields = opts.payer ? await stripeFieldsOf(em, opts.payer) : {};
  try {
    const session = await provider.checkoutTopUp({
      successUrl: withOrganization(returnUrls.successUrl, organizationId),
      cancelUrl: withOrganization(returnUrls.cancelUrl, organizationId),
      ...fields,
      accountId,
      amountCents: cents,
      currency,
      description: opts.saveCard ? `${coins}, and the card kept for auto top-up` : coins,
      idempotencyKey: `${opts.purpose}:${accountId}:${key}`,
      customerId: earlier?.customer_id,
      ...(opts.saveCard ? { saveForLater: true } : {}),
    });
    return { object: 'checkout_session', id: session.id, url: session.url };
  } catch (err) {
    throw providerFailure(err, deps.logger, 'to start the checkout');
  }
}
