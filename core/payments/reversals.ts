import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import { recordAudit } from '../admin/audit.ts';
import { newId } from '../ids.ts';
import { formatCoins, type Micro } from '../money/coins.ts';
import type { PaymentEvent } from '../ports.ts';
import { centsToMicro, formatUsd } from './amounts.ts';
import { notCredited, outcome, type EventOutcome } from './outcome.ts';

type RefundEvent = Extract<PaymentEvent, { kind: 'refund' }>;
type DisputeEvent = Extract<PaymentEvent, { kind: 'dispute' }>;

/** The history labels of the three steps (docs/payments.md, "Refunds and disputes"). */
export const REVERSAL_LABELS = { refund: 'Refund (Stripe)', dispute: 'Dispute', dispute_won: 'Dispute won' } as const;
type ReversalKind = keyof typeof REVERSAL_LABELS;

interface PaymentRow {
  id: string;
  account_id: string;
  /** The Checkout Session's id, or for an auto top-up (no session) its PaymentIntent's: what audit entries name. */
  checkout_session_id: string;
  amount_cents: number;
  currency: string;
}

/**
 * The top-up a charge or dispute belongs to, by its PaymentIntent, its row locked: the steps of
 * one payment (two refunds, a refund and a dispute) are taken one after the other, so what was
 * already taken back is read under the lock.
 */
async function paymentOf(tx: EntityManager, paymentIntentId: string | null): Promise<PaymentRow | null> {
  if (!paymentIntentId) return null;
  const [row] = await tx.execute<PaymentRow[]>(
    'select id, account_id, coalesce(checkout_session_id, payment_intent_id) as checkout_session_id, amount_cents::int as amount_cents, currency from payments where payment_intent_id = ? order by created_at limit 1 for update',
    [paymentIntentId],
  );
  return row ?? null;
}

/**
 * One step, exactly once: the purchased pocket moves by `coins` (negative: taken back; it may go
 * below zero) with its ledger entry (mas_reverse_payment, keyed `stepKey`), its payment_reversals
 * row (unique `stepKey`) and its audit entry, all in the event's transaction. False when the key
 * was used already (nothing moved).
 */
async function applyStep(
  tx: EntityManager,
  event: PaymentEvent,
  payment: PaymentRow,
  step: { kind: ReversalKind; providerObjectId: string; cents: number; stepKey: string; action: string; reason: string },
): Promise<boolean> {
  const coins: Micro = step.kind === 'dispute_won' ? centsToMicro(step.cents) : -centsToMicro(step.cents);
  const [row] = await tx.execute<{ status: string; entry_id: string | null; balance_after: string | null }[]>(
    'select status, entry_id::text, balance_after::text from mas_reverse_payment(?, ?::bigint, ?, ?, ?)',
    [payment.account_id, coins.toString(), step.providerObjectId, step.stepKey, REVERSAL_LABELS[step.kind]],
  );
  if (row!.status !== 'applied') return false;
  await tx.execute(
    `insert into payment_reversals (id, payment_id, account_id, kind, provider_object_id, amount_cents, coins_micro, step_key, event_id, ledger_entry_id)
     values (?, ?, ?, ?, ?, ?, ?::bigint, ?, ?, ?::bigint)`,
    [newId('prv'), payment.id, payment.account_id, step.kind, step.providerObjectId, step.cents, coins.toString(), step.stepKey, event.eventId, row!.entry_id],
  );
  await recordAudit(tx, { kind: 'internal' }, {
    action: step.action,
    targetType: 'payment',
    targetId: payment.checkout_session_id,
    reason: step.reason,
    after: {
      event_id: event.eventId,
      account_id: payment.account_id,
      payment_id: payment.id,
      [step.kind === 'refund' ? 'charge' : 'dispute']: step.providerObjectId,
      amount_cents: step.cents,
      coins: formatCoins(coins),
      purchased_coins_after: formatCoins(BigInt(row!.balance_after!)),
    },
  });
  return true;
}

/** A refund or dispute of a payment the service did not credit (an invoice, a payment it does not know): an operator looks. */
function unmatched(tx: EntityManager, event: PaymentEvent, objectId: string, paymentIntentId: string | null, facts: Record<string, unknown>) {
  return notCredited(tx, {
    outcome: 'unknown_payment',
    objectId,
    accountId: null,
    why: paymentIntentId ? `no top-up was credited for the payment ${paymentIntentId}: nothing taken back` : 'the event names no payment: nothing taken back',
    facts: { event_id: event.eventId, type: event.providerType, payment_intent: paymentIntentId, ...facts },
  });
}

/**
 * `charge.refunded`: Stripe's `amount_refunded` is what was refunded of the charge so far, in all.
 * The step takes back only its increase over what this payment's refunds already took (capped at
 * the payment), cents × 10 coins from the purchased pocket, keyed on the charge and the cumulative
 * amount: a replay, or an older event arriving after a newer one, takes nothing.
 */
export async function takeBackRefund(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: RefundEvent): Promise<EventOutcome> {
  const c = event.charge;
  const payment = await paymentOf(tx, c.paymentIntentId);
  if (!payment) return unmatched(tx, event, c.id, c.paymentIntentId, { charge: c.id, amount_refunded_cents: c.amountRefundedCents, currency: c.currency });
  if (c.currency !== payment.currency || c.currency !== deps.config.payments.currency) {
    return notCredited(tx, {
      outcome: 'refused_currency',
      objectId: payment.checkout_session_id,
      accountId: payment.account_id,
      why: `a refund in ${c.currency} of a payment in ${payment.currency}: nothing taken back`,
      facts: { event_id: event.eventId, charge: c.id, amount_refunded_cents: c.amountRefundedCents, currency: c.currency },
    });
  }
  const cumulative = Math.min(c.amountRefundedCents, payment.amount_cents);
  const [taken] = await tx.execute<{ cents: number }[]>(
    `select coalesce(sum(amount_cents), 0)::int as cents from payment_reversals where payment_id = ? and kind = 'refund'`,
    [payment.id],
  );
  const increase = cumulative - taken!.cents;
  if (increase <= 0) return outcome('already_refunded', payment.account_id);
  const applied = await applyStep(tx, event, payment, {
    kind: 'refund',
    providerObjectId: c.id,
    cents: increase,
    stepKey: `stripe:refund:${c.id}:${cumulative}`,
    action: 'payment.refunded',
    reason: `refunded ${formatUsd(increase)} USD (${formatUsd(cumulative)} of ${formatUsd(payment.amount_cents)} in all): ${formatCoins(centsToMicro(increase))} coins taken back`,
  });
  return outcome(applied ? 'refunded' : 'already_refunded', payment.account_id);
}

/**
 * A dispute (chargeback). Stripe withdraws the disputed amount when the dispute is created and
 * returns it if the dispute is won; the coins follow the money:
 * - `charge.dispute.created` takes the disputed coins back (`Dispute`), keyed on the dispute;
 *   an inquiry (status `warning_…`, no funds withdrawn) takes nothing;
 * - `charge.dispute.closed` as `lost` takes them with the same key (nothing more when the
 *   creation took them; they are taken now when its event was missed);
 * - closed as `won` gives back what the dispute took (`Dispute won`), keyed on the dispute too.
 */
export async function handleDispute(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: DisputeEvent): Promise<EventOutcome> {
  const d = event.dispute;
  const payment = await paymentOf(tx, d.paymentIntentId);
  if (!payment) return unmatched(tx, event, d.id, d.paymentIntentId, { dispute: d.id, charge: d.chargeId, amount_cents: d.amountCents, status: d.status });
  if (d.currency !== payment.currency || d.currency !== deps.config.payments.currency) {
    return notCredited(tx, {
      outcome: 'refused_currency',
      objectId: payment.checkout_session_id,
      accountId: payment.account_id,
      why: `a dispute in ${d.currency} of a payment in ${payment.currency}: nothing taken back`,
      facts: { event_id: event.eventId, dispute: d.id, amount_cents: d.amountCents, currency: d.currency },
    });
  }
  const cents = Math.min(d.amountCents, payment.amount_cents);
  const take = (action: string, reason: string) =>
    cents > 0 ? applyStep(tx, event, payment, { kind: 'dispute', providerObjectId: d.id, cents, stepKey: `stripe:dispute:${d.id}`, action, reason }) : Promise.resolve(false);

  if (event.stage === 'created') {
    if (d.status.startsWith('warning_')) return outcome('dispute_inquiry', payment.account_id);
    const taken = await take('payment.disputed', `disputed ${formatUsd(cents)} USD: ${formatCoins(centsToMicro(cents))} coins taken back until the dispute is won`);
    return outcome(taken ? 'dispute_taken' : 'already_disputed', payment.account_id);
  }
  if (d.status === 'lost') {
    const taken = await take('payment.dispute_lost', `dispute lost, ${formatUsd(cents)} USD: ${formatCoins(centsToMicro(cents))} coins taken back`);
    if (!taken) {
      // Taken at the creation: the loss is only written down.
      await recordAudit(tx, { kind: 'internal' }, {
        action: 'payment.dispute_lost',
        targetType: 'payment',
        targetId: payment.checkout_session_id,
        reason: `dispute lost: the ${formatUsd(cents)} USD taken back at its creation stay taken`,
        after: { event_id: event.eventId, account_id: payment.account_id, payment_id: payment.id, dispute: d.id },
      });
    }
    return outcome('dispute_lost', payment.account_id);
  }
  if (d.status === 'won') {
    const [took] = await tx.execute<{ cents: number }[]>(
      `select amount_cents::int as cents from payment_reversals where kind = 'dispute' and provider_object_id = ? and payment_id = ?`,
      [d.id, payment.id],
    );
    if (!took) return outcome('dispute_won', payment.account_id);
    const given = await applyStep(tx, event, payment, {
      kind: 'dispute_won',
      providerObjectId: d.id,
      cents: took.cents,
      stepKey: `stripe:dispute:${d.id}:won`,
      action: 'payment.dispute_won',
      reason: `dispute won: the ${formatUsd(took.cents)} USD taken back are given back (${formatCoins(centsToMicro(took.cents))} coins)`,
    });
    return outcome(given ? 'dispute_won' : 'already_given_back', payment.account_id);
  }
  return outcome('dispute_closed', payment.account_id);
}
