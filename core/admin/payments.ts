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
  kind: z.enum(['refund', 'refund_failed', 'dispute', 'dispute_won']).describe('refund_failed: a refund that failed gave its coins back; dispute_won: a dispute won (its funds reinstated) gave back what it held'),
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
  status: z
    .enum(['credited', 'partially_refunded', 'refunded', 'disputed', 'dispute_won'])
    .describe('disputed: a dispute has its funds withdrawn (open or lost); refunded and partially_refunded: by its refunds; dispute_won: a dispute was won and nothing else applies'),
  refunded_cents: z.number().int().describe('what its refunds returned to the customer, as Stripe said (at most the amount)'),
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
  /** bigint as text: read as a number only in TypeScript (no int cast in SQL can overflow). */
  amount_cents: string;
  currency: string;
  coins_micro: string;
  refunded_cents: string;
  disputed: boolean;
  won: boolean;
  created_at: Date | string;
}
interface ReversalRow {
  payment_id: string;
  kind: 'refund' | 'refund_failed' | 'dispute' | 'dispute_won';
  provider_object_id: string;
  amount_cents: string;
  coins_micro: string;
  created_at: Date | string;
}

/** The newest payments first (optionally one account's), each with its refunds and disputes. */
export async function listPayments(em: EntityManager, input: z.output<typeof paymentsInput>): Promise<z.infer<typeof paymentListSchema>> {
  const rows = await em.execute<PaymentRow[]>(
    `select p.id, p.account_id, p.source, p.checkout_session_id, p.payment_intent_id, p.customer_id, p.amount_cents::text as amount_cents, p.currency, p.coins_micro::text,
            least(p.amount_cents, coalesce(mas_payment_refunded_cents(p.payment_intent_id), 0))::text as refunded_cents,
            exists (select 1 from payment_disputes d where d.payment_intent_id = p.payment_intent_id and d.state in ('withdrawn', 'lost')) as disputed,
            exists (select 1 from payment_disputes d where d.payment_intent_id = p.payment_intent_id and d.state = 'won') as won,
            p.created_at
     from payments p where (?::text is null or p.account_id = ?) order by p.created_at desc, p.id desc limit ?`,
    [input.account_id ?? null, input.account_id ?? null, input.limit],
  );
  const reversals =
    rows.length === 0
      ? []
      : await em.execute<ReversalRow[]>(
          `select payment_id, kind, provider_object_id, amount_cents::text as amount_cents, coins_micro::text, created_at
           from payment_reversals where payment_id = any(string_to_array(?, ',')) order by created_at, id`,
          [rows.map((r) => r.id).join(',')],
        );
  return {
    object: 'list',
    data: rows.map((p) => {
      const mine = reversals.filter((r) => r.payment_id === p.id);
      const amount = Number(p.amount_cents);
      const refunded = Number(p.refunded_cents);
      const status = p.disputed
        ? 'disputed'
        : refunded >= amount
          ? 'refunded'
          : refunded > 0
            ? 'partially_refunded'
            : p.won
              ? 'dispute_won'
              : 'credited';
      return {
        id: p.id,
        object: 'payment' as const,
        account_id: p.account_id,
        source: p.source,
        checkout_session_id: p.checkout_session_id,
        payment_intent_id: p.payment_intent_id,
        customer_id: p.customer_id,
        amount_cents: amount,
        amount_usd: formatUsd(amount),
        currency: p.currency,
        coins: coinsToJson(BigInt(p.coins_micro)),
        status,
        refunded_cents: refunded,
        reversals: mine.map((r) => ({
          kind: r.kind,
          provider_object_id: r.provider_object_id,
          amount_cents: Number(r.amount_cents),
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
  // Every money sum stays numeric (bigint sums) in SQL and is read as text: a day of many large
  // payments passes 2^31 cents (21.47 M USD).
  const rows = await em.execute<{ day: string; usd: string; credited: string; spent: string; taken: string }[]>(
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
     select d.day, coalesce(u.cents, 0)::text as usd, coalesce(c.credited, 0)::text as credited, coalesce(c.spent, 0)::text as spent, coalesce(c.taken, 0)::text as taken
     from days d left join usd u on u.day = d.day left join coins c on c.day = d.day order by d.day`,
    [input.from, input.to, input.from, until, input.from, until, input.from, until],
  );
  return {
    object: 'revenue_per_day',
    from: input.from,
    to: input.to,
    data: rows.map((r) => ({
      day: r.day,
      usd_in_cents: Number(r.usd),
      usd_in: formatUsd(Number(r.usd)),
      coins_credited: coinsToJson(BigInt(r.credited)),
      coins_spent: coinsToJson(BigInt(r.spent)),
      coins_taken_back: coinsToJson(BigInt(r.taken)),
    })),
  };
}
