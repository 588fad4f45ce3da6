import type { EntityManager } from '@mikro-orm/postgresql';
import type { CoreDeps } from '../context.ts';
import { newId } from '../ids.ts';
import { credit } from '../money/wallet.ts';
import type { PaymentEvent } from '../ports.ts';
import { centsToMicro, formatUsd, largestTopUpCents } from './amounts.ts';
import { cardSavedAtCheckout } from './auto-top-up.ts';
import { notCredited, outcome, type EventOutcome } from './outcome.ts';
import { settleAfterCredit } from './reversals.ts';

type CheckoutEvent = Extract<PaymentEvent, { kind: 'checkout_session' }>;

/**
 * The rules of a top-up's credit, in the transaction that recorded the event:
 * - only a Checkout Session the service made as a top-up (payment mode, purpose `topup`);
 * - only once paid: `completed` with payment status `paid`, or `async_payment_succeeded`
 *   (also `paid` by then); a completed session still `unpaid` waits for that second event;
 * - only in the service's currency, for a positive amount no larger than the largest top-up
 *   (TOPUP_MAX_USD, and never above Stripe's 99,999,999 cents): `amount_total` cents × 10
 *   coins, into the purchased pocket as `Top-up`, which makes the account paid (mas_credit);
 * - once per session, whichever event carries it: the ledger entry's idempotency key and the
 *   payments row's unique session id, both in this transaction;
 * - the refunds and disputes of its payment that arrived before it are taken back at once.
 * A paid session that cannot be credited (unknown account, other currency, no amount, too large
 * an amount) is written to the admin audit log for an operator to settle by hand.
 */
export async function creditTopUp(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: CheckoutEvent): Promise<EventOutcome> {
  const s = event.session;
  // A plan bought through Checkout: its coins come with each paid invoice (subscriptions.ts).
  if (s.mode === 'subscription' && s.purpose === 'subscription') return outcome('subscription_checkout', s.accountId);
  if (s.mode !== 'payment' || s.purpose !== 'topup') return outcome('not_a_topup', s.accountId);
  if (event.stage === 'async_payment_failed') return outcome('payment_failed', s.accountId);
  if (s.paymentStatus !== 'paid') return outcome('awaiting_payment', s.accountId);

  const refuse = (name: string, why: string) =>
    notCredited(tx, {
      outcome: name,
      objectId: s.id,
      accountId: s.accountId,
      why,
      facts: { event_id: event.eventId, account_id: s.accountId, amount_cents: s.amountTotalCents, currency: s.currency, payment_intent: s.paymentIntentId },
    });
  if (s.currency !== deps.config.payments.currency) return refuse('refused_currency', `paid in ${s.currency ?? 'no currency'}, not ${deps.config.payments.currency}`);
  if (s.amountTotalCents === null || s.amountTotalCents <= 0) return refuse('refused_amount', 'the session has no amount to credit');
  const largest = largestTopUpCents(deps.config.payments);
  if (s.amountTotalCents > largest) return refuse('refused_amount', `${formatUsd(s.amountTotalCents)} USD is more than the largest top-up (${formatUsd(largest)} USD): nothing credited`);
  const [account] = s.accountId ? await tx.execute<{ id: string }[]>('select id from accounts where id = ?', [s.accountId]) : [];
  if (!account) return refuse('unknown_account', s.accountId ? `no account ${s.accountId}` : 'the session names no account');

  // The payment's lock before the wallet's (the order every step of a payment takes them in).
  if (s.paymentIntentId) await tx.execute('select mas_lock_payment(?)', [s.paymentIntentId]);
  const coins = centsToMicro(s.amountTotalCents);
  const entry = await credit(tx, {
    accountId: account.id,
    kind: 'topup',
    amount: coins,
    reference: s.id,
    idempotencyKey: `stripe:checkout:${s.id}`,
    description: 'Top-up',
  });
  if (!entry.applied) return outcome('already_credited', account.id);
  await tx.execute(
    `insert into payments (id, checkout_session_id, account_id, amount_cents, currency, coins_micro, payment_intent_id, customer_id, event_id, ledger_entry_id)
     values (?, ?, ?, ?, ?, ?::bigint, ?, ?, ?, ?::bigint)`,
    [newId('pay'), s.id, account.id, s.amountTotalCents, s.currency, coins.toString(), s.paymentIntentId, s.customerId, event.eventId, entry.entryId],
  );
  // A top-up that saved the card for auto top-up turns it on.
  await cardSavedAtCheckout(tx, account.id, s);
  await settleAfterCredit(tx, event.eventId, s.paymentIntentId);
  return outcome('credited', account.id);
}
