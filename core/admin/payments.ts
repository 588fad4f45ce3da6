import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { coinsToJson } from '../money/coins.ts';
import { formatUsd } from '../payments/amounts.ts';
import { coinsSchema, isoTimeSchema } from '../views.ts';
import { addDays, checkRange, idFilter, rangeShape } from './analytics/days.ts';

/**
 * Payments for operators (docs/payments.md, "Operators"): the top-ups credited from Stripe with
 * their refunds and disputes, and revenue per day. Read straight from the tables the webhook
 * writes (payments, payment_reversals, subscription_grants, the ledger), not from rollups.
 */
export const paymentsInput = z
  .object({
    account_id: idFilter.optional(),
    limit: z.number().int().min(1).max(200).default(50),
  })
  .strict();

const reversalSchema = z.object({
  kind: z.enum(['refund', 'dispute', 'dispute_won']),
  provider_object_id: z.string().describe('the refunded charge (`ch_…`) or the dispute (`dp_…`)'),
  amount_cents: z.number().int(),
  coins: coinsSchema.describe('signed: taken back (−) or given back (+)'),
  created_at: isoTimeSchema,
});

export const paymentSchema = z.object({
  id: z.string(),
  object: z.literal('payment'),
  account_id: z.string(),
  source: z.enum(['checkout', 'auto_top_up']).describe('checkout: paid on a Checkout page; auto_top_up: an off-session charge of a saved card'),
  checkout_session_id: z.string().nullable().describe('null for an auto top-up'),
  payment_intent_id: z.string().nullable(),
  customer_id: z.string().nullable(),
  amount_cents: z.number().int(),
  amount_usd: z.string().describe('"12.34"'),
  currency: z.string(),
  coins: coinsSchema,
  status: z.enum(['credited', 'partially_refunded', 'refunded', 'disputed', 'dispute_won']).describe('disputed: a dispute took its coins back and was not won (open or lost)'),
  refunded_cents: z.number().int(),
  reversals: z.array(reversalSchema),
  created_at: isoTimeSchema,
});
export const paymentListSchema = z.object({ object: z.literal('list'), data: z.array(paymentSchema) });

interface PaymentRow {
  id: string;
  account_id: string;
  source: 'checkout' | 'auto_top_up';
  checkout_session_id: string | null;
  payment_intent_id: string | null;
  customer_id: string | null;
  amount_cents: number;
  currency: string;
  coins_micro: string;
  created_at: Date | string;
}
interface ReversalRow {
  payment_id: string;
  kind: 'refund' | 'dispute' | 'dispute_won';
  provider_object_id: string;
  amount_cents: number;
  coins_micro: string;
  created_at: Date | string;
}

/** The newest payments first (optionally one account's), each with its refunds and disputes. */
export async function listPayments(em: EntityManager, input: z.output<typeof paymentsInput>): Promise<z.infer<typeof paymentListSchema>> {
  const rows = await em.execute<PaymentRow[]>(
    `select id, account_id, source, checkout_session_id, payment_intent_id, customer_id, amount_cents::int as amount_cents, currency, coins_micro::text, created_at
     from payments where (?::text is null or account_id = ?) order by created_at desc, id desc limit ?`,
    [input.account_id ?? null, input.account_id ?? null, input.limit],
  );
  const reversals =
    rows.length === 0
      ? []
      : await em.execute<ReversalRow[]>(
          `select payment_id, kind, provider_object_id, amount_cents::int as amount_cents, coins_micro::text, created_at
           from payment_reversals where payment_id = any(string_to_array(?, ',')) order by created_at, id`,
          [rows.map((r) => r.id).join(',')],
        );
  return {
    object: 'list',
    data: rows.map((p) => {
      const mine = reversals.filter((r) => r.payment_id === p.id);
      const refunded = mine.filter((r) => r.kind === 'refund').reduce((a, r) => a + r.amount_cents, 0);
      const disputes = new Set(mine.filter((r) => r.kind === 'dispute').map((r) => r.provider_object_id));
      const won = new Set(mine.filter((r) => r.kind === 'dispute_won').map((r) => r.provider_object_id));
      const status =
        [...disputes].some((d) => !won.has(d)) ? 'disputed' : disputes.size > 0 ? 'dispute_won' : refunded >= p.amount_cents ? 'refunded' : refunded > 0 ? 'partially_refunded' : 'credited';
      return {
        id: p.id,
        object: 'payment' as const,
        account_id: p.account_id,
        source: p.source,
        checkout_session_id: p.checkout_session_id,
        payment_intent_id: p.payment_intent_id,
        customer_id: p.customer_id,
        amount_cents: p.amount_cents,
        amount_usd: formatUsd(p.amount_cents),
        currency: p.currency,
        coins: coinsToJson(BigInt(p.coins_micro)),
        status,
        refunded_cents: refunded,
        reversals: mine.map((r) => ({
          kind: r.kind,
          provider_object_id: r.provider_object_id,
          amount_cents: r.amount_cents,
          coins: coinsToJson(BigInt(r.coins_micro)),
          created_at: new Date(r.created_at).toISOString(),
        })),
        created_at: new Date(p.created_at).toISOString(),
      };
    }),
  };
}

export const revenueInput = z.object(rangeShape).strict().superRefine(checkRange);

export const revenueSchema = z.object({
  object: z.literal('revenue_per_day'),
  from: z.string(),
  to: z.string(),
  data: z.array(
    z.object({
      day: z.string(),
      usd_in_cents: z.number().int().describe('top-ups and paid subscription invoices credited that day'),
      usd_in: z.string().describe('"12.34"'),
      coins_credited: coinsSchema.describe('top-ups and subscription grants'),
      coins_spent: coinsSchema.describe('captured by requests and jobs'),
      coins_taken_back: coinsSchema.describe('refunds and disputes, net of disputes won'),
    }),
  ),
});

/** Per UTC day of the range (days with nothing included, as zeros): money in and coins in and out. */
export async function revenuePerDay(em: EntityManager, input: z.output<typeof revenueInput>): Promise<z.infer<typeof revenueSchema>> {
  const until = addDays(input.to, 1);
  const rows = await em.execute<{ day: string; usd: number; credited: string; spent: string; taken: string }[]>(
    `with days as (select to_char(d, 'YYYY-MM-DD') as day from generate_series(?::date, ?::date, interval '1 day') d),
     usd as (
       select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day, sum(amount_cents) as cents from (
         select created_at, amount_cents from payments where created_at >= ?::date and created_at < ?::date
         union all
         select created_at, amount_paid_cents from subscription_grants where created_at >= ?::date and created_at < ?::date) x
       group by 1),
     coins as (
       select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as day,
              coalesce(sum(amount_micro) filter (where kind in ('topup', 'subscription_grant')), 0) as credited,
              coalesce(-sum(amount_micro) filter (where kind = 'capture'), 0) as spent,
              coalesce(-sum(amount_micro) filter (where kind = 'payment_reversal'), 0) as taken
       from ledger_entries where created_at >= ?::date and created_at < ?::date group by 1)
     select d.day, coalesce(u.cents, 0)::int as usd, coalesce(c.credited, 0)::text as credited, coalesce(c.spent, 0)::text as spent, coalesce(c.taken, 0)::text as taken
     from days d left join usd u on u.day = d.day left join coins c on c.day = d.day order by d.day`,
    [input.from, input.to, input.from, until, input.from, until, input.from, until],
  );
  return {
    object: 'revenue_per_day',
    from: input.from,
    to: input.to,
    data: rows.map((r) => ({
      day: r.day,
      usd_in_cents: r.usd,
      usd_in: formatUsd(r.usd),
      coins_credited: coinsToJson(BigInt(r.credited)),
      coins_spent: coinsToJson(BigInt(r.spent)),
      coins_taken_back: coinsToJson(BigInt(r.taken)),
    })),
  };
}
