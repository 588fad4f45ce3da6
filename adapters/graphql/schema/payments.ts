import type { z } from 'zod';
import type { paymentListSchema, revenueSchema } from '../../../core/admin/payments.ts';
import { builder } from '../builder.ts';
import { present } from './paging.ts';

/** Payments from Stripe and revenue per day (core: admin.payments.*, docs/payments.md "Operators"), for any admin role. */
type Payment = z.infer<typeof paymentListSchema>['data'][number];
type Revenue = z.infer<typeof revenueSchema>;

const PaymentReversal = builder.objectRef<Payment['reversals'][number]>('PaymentReversal').implement({
  description: 'A refund, a dispute or a dispute won, and the coins it moved.',
  fields: (t) => ({
    kind: t.exposeString('kind', { description: '`refund`, `refund_failed` (a refund that failed at Stripe: its coins given back), `dispute` or `dispute_won`.' }),
    stripeId: t.exposeString('provider_object_id', { description: 'The refunded charge (`ch_…`) or the dispute (`dp_…`).' }),
    amountCents: t.exposeInt('amount_cents'),
    coins: t.expose('coins', { type: 'Coins', description: 'Signed: taken back (−) or given back (+).' }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
  }),
});

const Payment = builder.objectRef<Payment>('Payment').implement({
  description: 'A top-up paid through Stripe (on a Checkout page, or an auto top-up charging a saved card) and credited, with its refunds and disputes.',
  fields: (t) => ({
    id: t.exposeString('id'),
    accountId: t.exposeString('account_id'),
    source: t.exposeString('source', { description: '`checkout` (paid on a Checkout page) or `auto_top_up` (a saved card charged off-session).' }),
    checkoutSessionId: t.exposeString('checkout_session_id', { nullable: true, description: 'Null for an auto top-up.' }),
    paymentIntentId: t.exposeString('payment_intent_id', { nullable: true }),
    customerId: t.exposeString('customer_id', { nullable: true }),
    amountCents: t.exposeInt('amount_cents'),
    amountUsd: t.exposeString('amount_usd', { description: '"12.34"' }),
    currency: t.exposeString('currency'),
    coins: t.expose('coins', { type: 'Coins', description: 'Credited.' }),
    status: t.exposeString('status', {
      description: '`disputed` (a dispute has its funds withdrawn: open or lost), `refunded`, `partially_refunded`, `dispute_won` (a dispute was won, nothing refunded) or `credited`.',
    }),
    refundedCents: t.exposeInt('refunded_cents', { description: 'What its refunds returned to the customer, as Stripe said (at most the amount).' }),
    reversals: t.field({ type: [PaymentReversal], description: 'Its refunds and disputes, oldest first.', resolve: (p) => p.reversals }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
  }),
});

const RevenueDay = builder.objectRef<Revenue['data'][number]>('RevenueDay').implement({
  fields: (t) => ({
    day: t.exposeString('day', { description: 'A UTC day, YYYY-MM-DD.' }),
    usdInCents: t.exposeFloat('usd_in_cents', { description: 'Top-ups and paid subscription invoices credited that day: a whole number of cents (a Float, as a day can pass the 2^31 cents of an Int).' }),
    usdIn: t.exposeString('usd_in', { description: '"12.34"' }),
    coinsCredited: t.expose('coins_credited', { type: 'Coins', description: 'Top-ups and subscription grants.' }),
    coinsSpent: t.expose('coins_spent', { type: 'Coins', description: 'Captured by requests and jobs.' }),
    coinsTakenBack: t.expose('coins_taken_back', { type: 'Coins', description: 'Refunds and disputes, net of disputes won.' }),
  }),
});

builder.queryFields((t) => ({
  payments: t.field({
    type: [Payment],
    description: 'Credited Stripe payments, newest first, with their refunds and disputes.',
    args: { accountId: t.arg.string(), limit: t.arg.int({ description: '1 to 200, default 50.' }) },
    resolve: async (_root, args, ctx) => (await ctx.core.admin.payments.list({ ...present({ account_id: args.accountId, limit: args.limit }) })).data,
  }),
  revenuePerDay: t.field({
    type: [RevenueDay],
    description: 'USD in, coins credited, spent and taken back, per UTC day of the range (every day, zeros included).',
    args: {
      from: t.arg.string({ required: true, description: 'First day, included. YYYY-MM-DD.' }),
      to: t.arg.string({ required: true, description: 'Last day, included (at most 366 days). YYYY-MM-DD.' }),
    },
    resolve: async (_root, args, ctx) => (await ctx.core.admin.payments.revenue({ from: args.from, to: args.to })).data,
  }),
}));
