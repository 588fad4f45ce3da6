import { createHash, randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { CoreDeps } from '../context.ts';
import { CoreError, invalid } from '../errors.ts';
import { idempotencyKeySchema } from '../idempotency.ts';
import { coinsToJson } from '../money/coins.ts';
import { formatUsd } from './amounts.ts';
import { PLAN_PERIODS } from './plans.ts';
import { stripeFieldsOf, withOrganization, type Payer } from './payer.ts';
import { paymentProvider, providerFailure } from './setup.ts';
import { checkoutSessionSchema } from './create-checkout.ts';
import { fillReceipts } from './receipts.ts';

/**
 * The customer's side of billing besides top-ups (docs/payments.md): buying a plan through
 * Checkout in subscription mode, the link to the provider's customer portal, and the one read
 * the account pages show (what may be paid, the plans, the subscription, recent payments).
 * Coins still enter only from verified webhooks.
 */

export const subscriptionCheckoutInput = z.object({
  plan: z.string().trim().min(1).max(100).describe('the name of a plan, as listed by GET /credits/billing'),
  /** Makes a retried request return the first Checkout Session. */
  idempotency_key: idempotencyKeySchema.optional(),
});

/** The provider's customer of the account: from its latest subscription or, failing that, its latest paid top-up. */
async function customerOf(em: EntityManager, accountId: string): Promise<string | undefined> {
  const [row] = await em.execute<{ customer_id: string }[]>(
    `select customer_id from (
       select customer_id, created_at from subscriptions where account_id = ? and customer_id is not null
       union all
       select customer_id, created_at from payments where account_id = ? and customer_id is not null
     ) c order by created_at desc limit 1`,
    [accountId, accountId],
  );
  return row?.customer_id;
}

async function activeSubscription(em: EntityManager, accountId: string) {
  const [row] = await em.execute<{ id: string; plan_name: string | null }[]>(
    'select id, plan_name from subscriptions where account_id = ? and ended_at is null order by created_at desc limit 1',
    [accountId],
  );
  return row;
}

/**
 * A payment page (Checkout, subscription mode) for the plan named `plan` (PLANS_FILE). Refused
 * while payments are off, for a name in no plan, and while the account already has a running
 * subscription (changing plans is the customer portal's job). Nothing is granted here: each
 * paid invoice grants its period's coins (subscriptions.ts). An organization's plan (payer.ts)
 * is named in Stripe's metadata, copied onto each invoice, so its grants go to its wallet.
 */
export async function createSubscriptionCheckout(
  deps: Pick<CoreDeps, 'payments' | 'config' | 'logger'>,
  em: EntityManager,
  payer: Payer,
  input: z.output<typeof subscriptionCheckoutInput>,
): Promise<z.infer<typeof checkoutSessionSchema>> {
  const accountId = payer.accountId;
  const provider = paymentProvider(deps);
  const { plans, returnUrls } = deps.config.payments;
  const plan = plans.find((p) => p.name === input.plan) ?? plans.find((p) => p.name.toLowerCase() === input.plan.toLowerCase());
  if (!plan) {
    const known = plans.length > 0 ? `The plans are: ${plans.map((p) => p.name).join(', ')}.` : 'This server offers no plans.';
    throw invalid('plan', `There is no plan named "${input.plan}". ${known}`, 'unknown_plan');
  }
  const running = await activeSubscription(em, accountId);
  if (running) {
    throw new CoreError('conflict', `This account already has a subscription${running.plan_name ? ` (${running.plan_name})` : ''}: change or cancel it in the customer portal.`, {
      param: 'plan',
      reason: 'already_subscribed',
    });
  }
  const key = input.idempotency_key ? createHash('sha256').update(input.idempotency_key).digest('base64url') : randomUUID();
  try {
    const session = await provider.checkoutSubscription({
      successUrl: withOrganization(returnUrls.subscriptionSuccessUrl ?? returnUrls.successUrl, payer.organizationId),
      cancelUrl: withOrganization(returnUrls.cancelUrl, payer.organizationId),
      ...(await stripeFieldsOf(em, payer)),
      accountId,
      priceId: plan.priceId,
      idempotencyKey: `subscription:${accountId}:${key}`,
      customerId: await customerOf(em, accountId),
    });
    return { object: 'checkout_session', id: session.id, url: session.url };
  } catch (err) {
    throw providerFailure(err, deps.logger, 'to start the checkout');
  }
}

export const portalLinkSchema = z.object({ object: z.literal('billing_portal'), url: z.string().describe("the provider's customer portal: change the card, see invoices, cancel the plan") }).strict();

/** A link to the provider's customer portal for the account's customer; refused when the account never paid (it has none). */
export async function createPortalLink(deps: Pick<CoreDeps, 'payments' | 'config' | 'logger'>, em: EntityManager, accountId: string, organizationId: string | null = null): Promise<z.infer<typeof portalLinkSchema>> {
  const provider = paymentProvider(deps);
  const customerId = await customerOf(em, accountId);
  if (!customerId) {
    throw new CoreError('conflict', 'This account has not paid through Stripe yet, so it has no billing details to manage: add credits or subscribe first.', { reason: 'no_billing_customer' });
  }
  const { returnUrls } = deps.config.payments;
  try {
    const link = await provider.portalLink({ customerId, returnUrl: withOrganization(returnUrls.portalReturnUrl ?? returnUrls.cancelUrl, organizationId) });
    return { object: 'billing_portal', url: link.url };
  } catch (err) {
    throw providerFailure(err, deps.logger, 'to open the billing portal');
  }
}

export const billingSchema = z
  .object({
    object: z.literal('billing'),
    payments_enabled: z.boolean().describe('false: this server takes no payments, coins come only from its operator'),
    currency: z.string(),
    coins_per_usd: z.number(),
    topup_min_usd: z.string(),
    topup_max_usd: z.string(),
    plans: z.array(
      z.object({
        name: z.string(),
        coins_per_period: z.number(),
        price_usd: z.string().nullable().describe('what each period costs, as the operator states it (PLANS_FILE); null: not stated'),
        period: z.enum(PLAN_PERIODS).nullable().describe('how often the plan charges and grants its coins; null: not stated'),
      }),
    ),
    subscription: z
      .object({
        id: z.string(),
        plan: z.string().nullable(),
        status: z.enum(['active', 'canceled']),
        current_period_end: z.string().nullable().describe('the next renewal, while active'),
        ended_at: z.string().nullable(),
      })
      .nullable(),
    can_manage_billing: z.boolean().describe('whether the account has a Stripe customer, for the customer portal'),
    payments: z.array(
      z.object({ id: z.string(), source: z.enum(['checkout', 'auto_top_up']), checkout_session_id: z.string().nullable(), amount_usd: z.string(), coins: z.number(), created_at: z.string(), receipt_url: z.string().nullable() }),
    ),
  })
  .strict();

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

/** What the account pages show about paying: bounds, plans, the latest subscription and the 10 latest top-ups. */
export async function billingOverview(deps: Pick<CoreDeps, 'payments' | 'config' | 'logger'>, em: EntityManager, accountId: string): Promise<z.infer<typeof billingSchema>> {
  const c = deps.config.payments;
  await fillReceipts(deps, em, accountId);
  const [sub] = await em.execute<{ id: string; plan_name: string | null; current_period_end: Date | null; ended_at: Date | null }[]>(
    'select id, plan_name, current_period_end, ended_at from subscriptions where account_id = ? order by (ended_at is null) desc, created_at desc limit 1',
    [accountId],
  );
  const payments = await em.execute<{ id: string; source: 'checkout' | 'auto_top_up'; checkout_session_id: string | null; amount_cents: string; coins_micro: string; created_at: Date; receipt_url: string | null }[]>(
    'select id, source, checkout_session_id, amount_cents, coins_micro, created_at, receipt_url from payments where account_id = ? order by created_at desc limit 10',
    [accountId],
  );
  return {
    object: 'billing',
    payments_enabled: deps.payments !== undefined,
    currency: c.currency,
    coins_per_usd: 1000,
    topup_min_usd: formatUsd(c.topUpMinCents),
    topup_max_usd: formatUsd(c.topUpMaxCents),
    plans: c.plans.map((p) => ({ name: p.name, coins_per_period: coinsToJson(p.coinsPerPeriod), price_usd: p.priceCents === undefined ? null : formatUsd(p.priceCents), period: p.period ?? null })),
    subscription: sub
      ? { id: sub.id, plan: sub.plan_name, status: sub.ended_at ? 'canceled' : 'active', current_period_end: sub.ended_at ? null : iso(sub.current_period_end), ended_at: iso(sub.ended_at) }
      : null,
    can_manage_billing: (await customerOf(em, accountId)) !== undefined,
    payments: payments.map((p) => ({
      id: p.id,
      source: p.source,
      checkout_session_id: p.checkout_session_id,
      amount_usd: formatUsd(Number(p.amount_cents)),
      coins: coinsToJson(BigInt(p.coins_micro)),
      created_at: iso(p.created_at)!,
      receipt_url: p.receipt_url,
    })),
  };
}

export const topUpStatusInput = z.object({ session_id: z.string().trim().min(1, 'is required').max(255).regex(/^[A-Za-z0-9_]+$/, 'must be a Checkout Session id (cs_…)') });

export const topUpStatusSchema = z
  .object({ object: z.literal('top_up_status'), session_id: z.string(), credited: z.boolean(), coins: z.number().nullable(), amount_usd: z.string().nullable() })
  .strict();

/**
 * Whether the top-up of a Checkout Session of this account has been credited (the success
 * page polls it). A session of another account, or unknown, reads as not credited yet: the
 * page learns nothing about other accounts.
 */
export async function topUpStatus(em: EntityManager, accountId: string, sessionId: string): Promise<z.infer<typeof topUpStatusSchema>> {
  const [row] = await em.execute<{ amount_cents: string; coins_micro: string }[]>(
    'select amount_cents, coins_micro from payments where checkout_session_id = ? and account_id = ?',
    [sessionId, accountId],
  );
  return {
    object: 'top_up_status',
    session_id: sessionId,
    credited: row !== undefined,
    coins: row ? coinsToJson(BigInt(row.coins_micro)) : null,
    amount_usd: row ? formatUsd(Number(row.amount_cents)) : null,
  };
}
