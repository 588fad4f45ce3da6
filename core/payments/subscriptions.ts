import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import { newId } from '../ids.ts';
import { credit } from '../money/wallet.ts';
import type { PaymentEvent } from '../ports.ts';
import { formatUsd, STRIPE_MAX_CENTS } from './amounts.ts';
import { notCredited, outcome, type EventOutcome } from './outcome.ts';

type InvoiceEvent = Extract<PaymentEvent, { kind: 'invoice_paid' }>;
type DeletionEvent = Extract<PaymentEvent, { kind: 'subscription_deleted' }>;

interface SubscriptionRow {
  account_id: string;
  ended_at: Date | string | null;
}

/** The subscription's row, locked: a grant and a deletion of one subscription take turns. */
async function lockSubscription(tx: EntityManager, id: string): Promise<SubscriptionRow | undefined> {
  const [row] = await tx.execute<SubscriptionRow[]>('select account_id, ended_at from subscriptions where id = ? for update', [id]);
  return row;
}

async function accountExists(tx: EntityManager, id: string | null): Promise<boolean> {
  if (!id) return false;
  return (await tx.execute('select 1 from accounts where id = ?', [id])).length > 0;
}

/**
 * A paid subscription invoice grants its plan's coins (PLANS_FILE, by the invoice's price) to
 * the subscription pocket as `Subscription coins`, once per invoice (the ledger key
 * `stripe:invoice:<id>` and the unique invoice id of subscription_grants, in this
 * transaction), which makes the account paid. Each period's invoice is its own grant; unused
 * coins stay, as for any grant. Nothing is granted for an invoice of no money (a trial, a
 * 100 % coupon), nor after the subscription was deleted. A paid invoice that cannot be
 * granted (unknown plan or account, another currency, a deleted subscription) is audited for
 * an operator.
 */
export async function grantInvoice(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: InvoiceEvent): Promise<EventOutcome> {
  const i = event.invoice;
  if (!i.subscriptionId) return outcome('not_a_subscription', i.accountId);
  if (i.amountPaidCents <= 0) return outcome('nothing_paid', i.accountId);
  const subscriptionId = i.subscriptionId;
  let subscription = await lockSubscription(tx, subscriptionId);
  const accountId = subscription?.account_id ?? i.accountId;
  const refuse = (name: string, why: string) =>
    notCredited(tx, {
      outcome: name,
      objectId: i.id,
      accountId,
      why,
      facts: { event_id: event.eventId, account_id: accountId, subscription: subscriptionId, prices: i.priceIds, amount_paid_cents: i.amountPaidCents, currency: i.currency },
    });
  const { currency, plans } = deps.config.payments;
  if (i.currency !== currency) return refuse('refused_currency', `paid in ${i.currency}, not ${currency}`);
  if (i.amountPaidCents > STRIPE_MAX_CENTS) return refuse('refused_amount', `${formatUsd(i.amountPaidCents)} USD is more than Stripe charges in one payment: nothing granted`);
  const plan = plans.find((p) => i.priceIds.includes(p.priceId));
  if (!plan) return refuse('unknown_plan', `no plan in the plans file has price ${i.priceIds.join(', ') || '(none)'}`);
  if (!subscription) {
    if (!(await accountExists(tx, accountId))) return refuse('unknown_account', accountId ? `no account ${accountId}` : 'the invoice names no account');
    // A concurrent first invoice of the same subscription inserts it too: one wins, both then lock it.
    await tx.execute(`insert into subscriptions (id, account_id, customer_id) values (?, ?, ?) on conflict (id) do nothing`, [subscriptionId, accountId, i.customerId]);
    subscription = (await lockSubscription(tx, subscriptionId))!;
  }
  if (subscription.ended_at) return refuse('subscription_ended', 'the subscription had been deleted when this invoice arrived');

  const entry = await credit(tx, {
    accountId: subscription.account_id,
    kind: 'subscription_grant',
    amount: plan.coinsPerPeriod,
    reference: i.id,
    idempotencyKey: `stripe:invoice:${i.id}`,
    description: 'Subscription coins',
  });
  if (!entry.applied) return outcome('already_credited', subscription.account_id);
  await tx.execute(
    `insert into subscription_grants (id, invoice_id, subscription_id, account_id, plan_name, amount_paid_cents, currency, coins_micro, event_id, ledger_entry_id)
     values (?, ?, ?, ?, ?, ?, ?, ?::bigint, ?, ?::bigint)`,
    [newId('sgr'), i.id, subscriptionId, subscription.account_id, plan.name, i.amountPaidCents, i.currency, plan.coinsPerPeriod.toString(), event.eventId, entry.entryId],
  );
  await tx.execute(
    `update subscriptions set plan_name = ?, price_id = ?, current_period_end = greatest(current_period_end, ?::timestamptz) where id = ?`,
    [plan.name, plan.priceId, i.periodEnd, subscriptionId],
  );
  return outcome('credited', subscription.account_id);
}

/** `customer.subscription.deleted`: no invoice of the subscription grants anything any more. */
export async function endSubscription(tx: EntityManager, event: DeletionEvent): Promise<EventOutcome> {
  const s = event.subscription;
  let subscription = await lockSubscription(tx, s.id);
  if (!subscription) {
    // Deleted before any paid invoice arrived: remembered as ended, so a late invoice grants nothing.
    if (!(await accountExists(tx, s.accountId))) return outcome('unknown_account', s.accountId);
    await tx.execute('insert into subscriptions (id, account_id, customer_id) values (?, ?, ?) on conflict (id) do nothing', [s.id, s.accountId, s.customerId]);
    subscription = (await lockSubscription(tx, s.id))!;
  }
  if (subscription.ended_at) return outcome('already_ended', subscription.account_id);
  await tx.execute('update subscriptions set ended_at = now() where id = ?', [s.id]);
  return outcome('subscription_ended', subscription.account_id);
}
