import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import { recordAudit } from '../admin/audit.ts';
import { formatCoins } from '../money/coins.ts';
import type { PaymentEvent } from '../ports.ts';
import { formatUsd } from './amounts.ts';
import { notCredited, outcome, type EventOutcome } from './outcome.ts';

type RefundEvent = Extract<PaymentEvent, { kind: 'refund' }>;
type RefundObjectEvent = Extract<PaymentEvent, { kind: 'refund_object' }>;
type DisputeEvent = Extract<PaymentEvent, { kind: 'dispute' }>;

/**
 * Refunds and disputes (docs/payments.md, "Refunds and disputes"). What the payment provider says
 * about a payment is recorded under the payment's lock, by its PaymentIntent, whether or not the
 * payment is credited yet (mas_record_charge_refund, mas_record_refund, mas_record_dispute); then
 * mas_settle_payment moves the coins so that what the payment has taken back equals
 * min(credited, refunded + what its withdrawn disputes hold), each claim giving back what it no
 * longer wants (a refund that failed, a dispute won) before any takes more. The rules are the SQL
 * functions' (core/money/money.sql); here: what an event says, the answer and the audit entries.
 */

/** A dispute's state as the service keeps it: only `withdrawn` and `lost` hold money. */
export type DisputeState = 'inquiry' | 'withdrawn' | 'won' | 'lost' | 'closed';

/**
 * What one dispute event says of the funds, by Stripe's dispute statuses and balance
 * transactions: an inquiry (`warning_needs_response`, `warning_under_review`) withdraws nothing;
 * a chargeback (`needs_response`, `under_review`) has its funds withdrawn, unless the event shows
 * no balance transaction yet; `charge.dispute.funds_withdrawn` withdraws (an inquiry escalated);
 * `won` or `charge.dispute.funds_reinstated` gives the funds back; `lost` keeps them; an inquiry
 * closed (`warning_closed`), a dispute `prevented` or closed as `charge_refunded` never took any.
 */
export function disputeState(stage: DisputeEvent['stage'], status: string, balanceAmounts: number[] | null): DisputeState {
  const withdrawn = balanceAmounts?.some((a) => a < 0) ?? false;
  const reinstated = balanceAmounts?.some((a) => a > 0) ?? false;
  if (status === 'lost') return 'lost';
  if (status === 'won' || stage === 'funds_reinstated' || reinstated) return 'won';
  if (status === 'warning_closed' || status === 'prevented' || status === 'charge_refunded') return 'closed';
  if (stage === 'funds_withdrawn' || withdrawn) return 'withdrawn';
  if ((status === 'needs_response' || status === 'under_review') && (balanceAmounts === null || balanceAmounts.length > 0)) return 'withdrawn';
  return 'inquiry';
}

const holdsMoney = (state: DisputeState) => state === 'withdrawn' || state === 'lost';

interface PaymentRow {
  id: string;
  account_id: string;
  /** The Checkout Session's id, or for an auto top-up (no session) its PaymentIntent's: what audit entries name. */
  target: string;
}

/**
 * The credited payment of a PaymentIntent, or null while none is. Read after a record function
 * took the payment's lock, so a credit of the same payment either committed before (and is seen
 * here) or waits for this transaction (and settles what it recorded).
 */
async function creditedPayment(tx: EntityManager, paymentIntentId: string): Promise<PaymentRow | null> {
  const [row] = await tx.execute<PaymentRow[]>(
    `select id, account_id, coalesce(checkout_session_id, payment_intent_id) as target
     from payments where payment_intent_id = ? order by created_at, id limit 1`,
    [paymentIntentId],
  );
  return row ?? null;
}

type StepKind = 'refund' | 'refund_failed' | 'dispute' | 'dispute_won';
interface Step {
  step_kind: StepKind;
  step_object: string;
  step_cents: string;
  step_micro: string;
  purchased_after: string;
}

const STEP_AUDIT: Record<StepKind, { action: string; reason: (usd: string, coins: string) => string }> = {
  refund: { action: 'payment.refunded', reason: (usd, coins) => `refunded ${usd} USD: ${coins} coins taken back` },
  refund_failed: { action: 'payment.refund_failed', reason: (usd, coins) => `a refund of ${usd} USD failed at the payment provider: ${coins} coins given back` },
  dispute: { action: 'payment.disputed', reason: (usd, coins) => `disputed ${usd} USD: ${coins} coins taken back until the dispute is won` },
  dispute_won: { action: 'payment.dispute_won', reason: (usd, coins) => `dispute won, its funds reinstated: the ${usd} USD it held are given back (${coins} coins)` },
};

/**
 * mas_settle_payment for the payment, with an audit entry per step it took (target the
 * payment's session, actor internal), in the event's transaction. Answers the steps.
 */
async function settle(tx: EntityManager, eventId: string, paymentIntentId: string, payment: PaymentRow, note = ''): Promise<Step[]> {
  const steps = await tx.execute<Step[]>(
    'select step_kind, step_object, step_cents::text, step_micro::text, purchased_after::text from mas_settle_payment(?, ?)',
    [paymentIntentId, eventId],
  );
  for (const s of steps) {
    const audit = STEP_AUDIT[s.step_kind];
    const coins = formatCoins(BigInt(s.step_micro));
    await recordAudit(tx, { kind: 'internal' }, {
      action: audit.action,
      targetType: 'payment',
      targetId: payment.target,
      reason: `${audit.reason(formatUsd(Number(s.step_cents)), coins.replace(/^-/, ''))}${note}`,
      after: {
        event_id: eventId,
        account_id: payment.account_id,
        payment_id: payment.id,
        [s.step_kind.startsWith('refund') ? 'charge' : 'dispute']: s.step_object,
        amount_cents: Number(s.step_cents),
        coins,
        purchased_coins_after: formatCoins(BigInt(s.purchased_after)),
      },
    });
  }
  return steps;
}

/**
 * After a payment is credited (a top-up's session, an auto top-up's PaymentIntent; by the webhook
 * or the reconciliation), in the credit's transaction, which took the payment's lock before the
 * wallet's: the refunds and disputes recorded before it are taken back now.
 */
export async function settleAfterCredit(tx: EntityManager, eventId: string, paymentIntentId: string | null): Promise<void> {
  if (!paymentIntentId) return;
  const payment = await creditedPayment(tx, paymentIntentId);
  if (payment) await settle(tx, eventId, paymentIntentId, payment, ' (recorded before the payment was credited)');
}

/** A refund or dispute whose event names no payment: an operator looks. */
function unmatched(tx: EntityManager, event: PaymentEvent, objectId: string, facts: Record<string, unknown>) {
  return notCredited(tx, {
    outcome: 'unknown_payment',
    objectId,
    accountId: null,
    why: 'the event names no payment: nothing taken back',
    facts: { event_id: event.eventId, type: event.providerType, ...facts },
  });
}

function refusedCurrency(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: PaymentEvent, objectId: string, currency: string, facts: Record<string, unknown>) {
  return notCredited(tx, {
    outcome: 'refused_currency',
    objectId,
    accountId: null,
    why: `a refund or dispute in ${currency}, not ${deps.config.payments.currency}: nothing taken back`,
    facts: { event_id: event.eventId, type: event.providerType, currency, ...facts },
  });
}

/**
 * A refund or dispute of a payment not credited (yet): kept, and taken back when the payment is
 * credited, by the webhook or the reconciliation (docs/payments.md). Audited: if the payment is
 * not one the service credits (a subscription invoice's, another system's), an operator decides.
 */
async function pending(tx: EntityManager, event: PaymentEvent, objectId: string, paymentIntentId: string, facts: Record<string, unknown>): Promise<EventOutcome> {
  await recordAudit(tx, { kind: 'internal' }, {
    action: 'payment.reversal_pending',
    targetType: 'payment',
    targetId: objectId,
    reason: `no top-up of the payment ${paymentIntentId} is credited yet: kept, and taken back when it is credited (if it is not a top-up, nothing will be)`,
    after: { event_id: event.eventId, type: event.providerType, payment_intent: paymentIntentId, ...facts },
  });
  return outcome('reversal_pending', null, true);
}

/** What a refund event led to, once recorded: `refunded` (coins taken), `nothing_to_take`, `already_refunded`. */
function refundOutcome(steps: Step[], raised: boolean, accountId: string): EventOutcome {
  if (steps.some((s) => s.step_kind === 'refund')) return outcome('refunded', accountId);
  return outcome(raised ? 'nothing_to_take' : 'already_refunded', accountId);
}

/**
 * `charge.refunded`: Stripe's `amount_refunded` is what was refunded of the charge so far, in all;
 * the largest seen is kept (an older event arriving late changes nothing), and the payment settles.
 */
export async function takeBackRefund(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: RefundEvent): Promise<EventOutcome> {
  const c = event.charge;
  const facts = { charge: c.id, amount_refunded_cents: c.amountRefundedCents };
  if (!c.paymentIntentId) return unmatched(tx, event, c.id, facts);
  if (c.currency !== deps.config.payments.currency) return refusedCurrency(deps, tx, event, c.id, c.currency, facts);
  const [r] = await tx.execute<{ before: string; after: string }[]>('select refunded_before::text as before, refunded_after::text as after from mas_record_charge_refund(?, ?, ?::bigint)', [
    c.paymentIntentId,
    c.id,
    c.amountRefundedCents,
  ]);
  const payment = await creditedPayment(tx, c.paymentIntentId);
  if (!payment) return pending(tx, event, c.id, c.paymentIntentId, facts);
  const steps = await settle(tx, event.eventId, c.paymentIntentId, payment);
  return refundOutcome(steps, BigInt(r!.after) > BigInt(r!.before), payment.account_id);
}

/**
 * A refund object's event (refund.created, refund.updated, refund.failed, charge.refund.updated):
 * its amount and the furthest status it reached are kept; a refund that failed or was canceled
 * gives its coins back (`refund_failed`).
 */
export async function recordRefundObject(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: RefundObjectEvent): Promise<EventOutcome> {
  const r = event.refund;
  const facts = { refund: r.id, charge: r.chargeId, amount_cents: r.amountCents, status: r.status };
  if (!r.paymentIntentId) return unmatched(tx, event, r.id, facts);
  if (r.currency !== deps.config.payments.currency) return refusedCurrency(deps, tx, event, r.id, r.currency, facts);
  const [kept] = await tx.execute<{ before: string; after: string; status: string }[]>(
    'select refunded_before::text as before, refunded_after::text as after, kept_status as status from mas_record_refund(?, ?, ?, ?::bigint, ?)',
    [r.paymentIntentId, r.id, r.chargeId, r.amountCents, r.status],
  );
  const ended = kept!.status === 'failed' || kept!.status === 'canceled';
  const payment = await creditedPayment(tx, r.paymentIntentId);
  if (!payment) return ended || r.amountCents === 0 ? outcome(ended ? 'refund_failed' : 'already_refunded', null) : pending(tx, event, r.id, r.paymentIntentId, facts);
  const steps = await settle(tx, event.eventId, r.paymentIntentId, payment);
  if (ended) return outcome('refund_failed', payment.account_id);
  return refundOutcome(steps, BigInt(kept!.after) > BigInt(kept!.before), payment.account_id);
}

/**
 * A dispute event (charge.dispute.created, .updated, .funds_withdrawn, .funds_reinstated,
 * .closed). The dispute's state only moves forward (inquiry, then withdrawn, then won, lost or
 * closed), so its events may come in any order: a `created` after the dispute was won takes nothing.
 */
export async function handleDispute(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: DisputeEvent): Promise<EventOutcome> {
  const d = event.dispute;
  const facts = { dispute: d.id, charge: d.chargeId, amount_cents: d.amountCents, status: d.status };
  if (!d.paymentIntentId) return unmatched(tx, event, d.id, facts);
  if (d.currency !== deps.config.payments.currency) return refusedCurrency(deps, tx, event, d.id, d.currency, facts);
  const state = disputeState(event.stage, d.status, d.balanceAmounts);
  const [r] = await tx.execute<{ previous: DisputeState | null; kept: DisputeState }[]>(
    'select previous_state as previous, kept_state as kept from mas_record_dispute(?, ?, ?, ?::bigint, ?, ?)',
    [d.paymentIntentId, d.id, d.chargeId, d.amountCents, state, d.status],
  );
  const { previous, kept } = r!;
  const payment = await creditedPayment(tx, d.paymentIntentId);
  if (!payment) return holdsMoney(kept) ? pending(tx, event, d.id, d.paymentIntentId, { ...facts, state: kept }) : outcome(DISPUTE_OUTCOME[kept], null);
  const steps = await settle(tx, event.eventId, d.paymentIntentId, payment);
  const accountId = payment.account_id;
  // An event of a step the dispute is already past (a `created` after `closed`): nothing more.
  if (kept !== state) return outcome('already_closed', accountId);
  switch (kept) {
    case 'withdrawn':
      if (steps.some((s) => s.step_kind === 'dispute' && s.step_object === d.id)) return outcome('dispute_taken', accountId);
      return outcome(previous === 'withdrawn' ? 'already_disputed' : 'nothing_to_take', accountId);
    case 'lost':
      if (previous !== 'lost' && !steps.some((s) => s.step_kind === 'dispute')) {
        // Taken at the creation (or nothing to take): the loss is only written down.
        await recordAudit(tx, { kind: 'internal' }, {
          action: 'payment.dispute_lost',
          targetType: 'payment',
          targetId: payment.target,
          reason: `dispute lost: what it took back (of ${formatUsd(d.amountCents)} USD disputed) stays taken`,
          after: { event_id: event.eventId, account_id: accountId, payment_id: payment.id, dispute: d.id },
        });
      }
      return outcome('dispute_lost', accountId);
    case 'won':
      return outcome(previous === 'won' ? 'already_given_back' : 'dispute_won', accountId);
    default:
      return outcome(DISPUTE_OUTCOME[kept], accountId);
  }
}

const DISPUTE_OUTCOME: Record<DisputeState, string> = {
  inquiry: 'dispute_inquiry',
  withdrawn: 'dispute_taken',
  won: 'dispute_won',
  lost: 'dispute_lost',
  closed: 'dispute_closed',
};
