import { z } from 'zod';
import { PaymentWebhookError, type CheckoutSessionFacts, type PaidInvoiceFacts, type PaymentEvent, type PaymentIntentFacts } from '../../core/ports.ts';

/**
 * Stripe's webhook events as the port's domain events. Only the fields the service reads are
 * checked, loosely (a field Stripe adds or a newer API version's extra keys change nothing);
 * an event of a type the service uses whose object lacks what that type must have is refused
 * as a bad payload. The account comes from what the service put on the object when it made it
 * (the Checkout Session's client_reference_id, the metadata it copies to subscriptions).
 */
/** Keys of the metadata the service puts on what it creates at Stripe (adapters/payments/stripe.ts). */
export const METADATA = {
  account: 'mas_account_id',
  purpose: 'mas_purpose',
  savesCard: 'mas_saves_card',
  charge: 'mas_charge_id',
  /** Set on the payments of an organization's wallet (then also mas_account_id), for people reading Stripe's dashboard. */
  organization: 'mas_organization_id',
  /** The owner who started an organization's payment. */
  actingAccount: 'mas_acting_account_id',
} as const;

const stripeId = z.string().min(1).max(255);
/** An id, or the object it names when the event expanded it. */
const ref = z
  .union([z.string(), z.object({ id: z.string() })])
  .nullish()
  .transform((v) => (v == null ? null : typeof v === 'string' ? v : v.id));
const metadata = z.record(z.string(), z.string()).nullish().transform((m) => m ?? {});
const cents = z.number().int().min(0);
const currency = z.string().min(3).max(3).transform((c) => c.toLowerCase());

const envelope = z.object({
  id: stripeId,
  object: z.literal('event'),
  type: z.string().min(1).max(200),
  created: z.number().int().min(0),
  data: z.object({ object: z.record(z.string(), z.unknown()) }),
});

const checkoutSession = z.object({
  id: stripeId,
  mode: z.enum(['payment', 'subscription', 'setup']),
  client_reference_id: z.string().nullish(),
  metadata,
  payment_status: z.string().min(1),
  amount_total: cents.nullish(),
  currency: currency.nullish(),
  customer: ref,
  payment_intent: ref,
});

const invoice = z.object({
  id: stripeId,
  amount_paid: cents,
  currency,
  customer: ref,
  // Before API version 2025-03-31 the subscription and its metadata sat on the invoice
  // (`subscription`, `subscription_details.metadata`); since then they are under `parent`.
  subscription: ref,
  subscription_details: z.object({ metadata }).nullish(),
  parent: z
    .object({ subscription_details: z.object({ subscription: ref, metadata }).nullish() })
    .nullish(),
  lines: z.object({
    data: z.array(
      z.object({
        period: z.object({ end: z.number().int() }).nullish(),
        price: z.object({ id: z.string() }).nullish(),
        pricing: z.object({ price_details: z.object({ price: ref }).nullish() }).nullish(),
      }),
    ),
  }),
});

const paymentIntent = z.object({
  id: stripeId,
  metadata,
  amount_received: cents.nullish(),
  currency,
  customer: ref,
  last_payment_error: z.object({ message: z.string().nullish(), code: z.string().nullish() }).nullish(),
});
const subscription = z.object({ id: stripeId, customer: ref, metadata });
const charge = z.object({ id: stripeId, payment_intent: ref, amount: cents, amount_refunded: cents, currency });
const refund = z.object({ id: stripeId, charge: ref, payment_intent: ref, amount: cents, currency, status: z.string().min(1) });
const dispute = z.object({
  id: stripeId,
  charge: ref,
  payment_intent: ref,
  amount: cents,
  currency,
  status: z.string(),
  // The funds withdrawn (negative) and reinstated (positive) as the event saw them; read loosely
  // (an entry without an amount makes the list unknown, never a refused event).
  balance_transactions: z.array(z.unknown()).nullish(),
});

/** The amounts of a dispute's balance transactions, or null when the event carries none that can be read. */
function balanceAmounts(list: unknown[] | null | undefined): number[] | null {
  if (!list) return null;
  const amounts = list.map((t) => (t && typeof t === 'object' && Number.isInteger((t as { amount?: unknown }).amount) ? (t as { amount: number }).amount : null));
  return amounts.every((a): a is number => a !== null) ? amounts : null;
}

const DISPUTE_STAGES = {
  'charge.dispute.created': 'created',
  'charge.dispute.updated': 'updated',
  'charge.dispute.funds_withdrawn': 'funds_withdrawn',
  'charge.dispute.funds_reinstated': 'funds_reinstated',
  'charge.dispute.closed': 'closed',
} as const;

/** The events of one refund object: refund.failed in newer API versions, charge.refund.updated in older ones. */
const REFUND_OBJECT_TYPES = new Set(['refund.created', 'refund.updated', 'refund.failed', 'charge.refund.updated']);

const CHECKOUT_STAGES = {
  'checkout.session.completed': 'completed',
  'checkout.session.async_payment_succeeded': 'async_payment_succeeded',
  'checkout.session.async_payment_failed': 'async_payment_failed',
} as const;

/** A verified event (parsed JSON) as a domain event; throws PaymentWebhookError('payload') when it cannot be read. */
export function stripeEvent(raw: unknown): PaymentEvent {
  const parsed = envelope.safeParse(raw);
  if (!parsed.success) throw new PaymentWebhookError('payload', `The body is not a Stripe event: ${problem(parsed.error)}.`);
  const e = parsed.data;
  const base = { eventId: e.id, providerType: e.type, createdAt: new Date(e.created * 1000) };
  const object = <T extends z.ZodType>(schema: T): z.output<T> => {
    const result = schema.safeParse(e.data.object);
    if (!result.success) throw new PaymentWebhookError('payload', `The ${e.type} event's object cannot be read: ${problem(result.error)}.`);
    return result.data;
  };

  if (e.type in CHECKOUT_STAGES) {
    return { ...base, kind: 'checkout_session', stage: CHECKOUT_STAGES[e.type as keyof typeof CHECKOUT_STAGES], session: sessionFacts(object(checkoutSession)) };
  }
  switch (e.type) {
    case 'invoice.paid':
      return { ...base, kind: 'invoice_paid', invoice: invoiceFacts(object(invoice)) };
    case 'payment_intent.succeeded':
    case 'payment_intent.payment_failed':
      return { ...base, kind: 'payment_intent', stage: e.type === 'payment_intent.succeeded' ? 'succeeded' : 'failed', intent: intentFacts(object(paymentIntent)) };
    case 'customer.subscription.deleted': {
      const s = object(subscription);
      return { ...base, kind: 'subscription_deleted', subscription: { id: s.id, customerId: s.customer, accountId: s.metadata[METADATA.account] ?? null } };
    }
    case 'charge.refunded': {
      const c = object(charge);
      return { ...base, kind: 'refund', charge: { id: c.id, paymentIntentId: c.payment_intent, amountCents: c.amount, amountRefundedCents: c.amount_refunded, currency: c.currency } };
    }
    default:
      break;
  }
  if (e.type in DISPUTE_STAGES) {
    const d = object(dispute);
    return {
      ...base,
      kind: 'dispute',
      stage: DISPUTE_STAGES[e.type as keyof typeof DISPUTE_STAGES],
      dispute: {
        id: d.id,
        chargeId: d.charge,
        paymentIntentId: d.payment_intent,
        amountCents: d.amount,
        currency: d.currency,
        status: d.status,
        balanceAmounts: balanceAmounts(d.balance_transactions),
      },
    };
  }
  if (REFUND_OBJECT_TYPES.has(e.type)) {
    const r = object(refund);
    return { ...base, kind: 'refund_object', refund: { id: r.id, chargeId: r.charge, paymentIntentId: r.payment_intent, amountCents: r.amount, currency: r.currency, status: r.status } };
  }
  return { ...base, kind: 'ignored' };
}

function invoiceFacts(i: z.output<typeof invoice>): PaidInvoiceFacts {
  const details = i.parent?.subscription_details;
  const periodEnds = i.lines.data.map((l) => l.period?.end).filter((t): t is number => t !== undefined);
  return {
    id: i.id,
    subscriptionId: details?.subscription ?? i.subscription,
    customerId: i.customer,
    accountId: details?.metadata[METADATA.account] ?? i.subscription_details?.metadata[METADATA.account] ?? null,
    priceIds: i.lines.data.map((l) => l.pricing?.price_details?.price ?? l.price?.id ?? null).filter((p): p is string => p !== null),
    amountPaidCents: i.amount_paid,
    currency: i.currency,
    periodEnd: periodEnds.length > 0 ? new Date(Math.max(...periodEnds) * 1000) : null,
  };
}

/**
 * A Checkout Session or an invoice as the list endpoints give it (the reconciliation), read as
 * the webhook reads them; null for one that cannot be read (skipped, never a failure of the run).
 */
export function listedSession(raw: unknown): CheckoutSessionFacts | null {
  const r = checkoutSession.safeParse(raw);
  return r.success ? sessionFacts(r.data) : null;
}
export function listedInvoice(raw: unknown): PaidInvoiceFacts | null {
  const r = invoice.safeParse(raw);
  return r.success ? invoiceFacts(r.data) : null;
}
export function listedIntent(raw: unknown): PaymentIntentFacts | null {
  const r = paymentIntent.safeParse(raw);
  return r.success ? intentFacts(r.data) : null;
}

function intentFacts(i: z.output<typeof paymentIntent>): PaymentIntentFacts {
  return {
    id: i.id,
    purpose: i.metadata[METADATA.purpose] ?? null,
    accountId: i.metadata[METADATA.account] ?? null,
    chargeId: i.metadata[METADATA.charge] ?? null,
    amountReceivedCents: i.amount_received ?? 0,
    currency: i.currency,
    customerId: i.customer,
    failure: i.last_payment_error ? (i.last_payment_error.message ?? i.last_payment_error.code ?? 'the payment failed') : null,
  };
}

function sessionFacts(s: z.output<typeof checkoutSession>): CheckoutSessionFacts {
  return {
    id: s.id,
    mode: s.mode,
    accountId: s.client_reference_id ?? s.metadata[METADATA.account] ?? null,
    purpose: s.metadata[METADATA.purpose] ?? null,
    paymentStatus: s.payment_status,
    amountTotalCents: s.amount_total ?? null,
    currency: s.currency ?? null,
    customerId: s.customer,
    paymentIntentId: s.payment_intent,
    savesCard: s.metadata[METADATA.savesCard] === 'auto_topup',
  };
}

function problem(error: z.ZodError): string {
  const issue = error.issues[0];
  const where = issue?.path.length ? `${issue.path.join('.')}: ` : '';
  return `${where}${issue?.message ?? 'invalid'}`;
}
