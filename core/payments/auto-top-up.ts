import type { EntityManager } from '@mikro-orm/postgresql';
import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import type { CoreDeps } from '../context.ts';
import { CoreError } from '../errors.ts';
import { idempotencyKeySchema } from '../idempotency.ts';
import { newId } from '../ids.ts';
import { MICRO_PER_COIN } from '../money/coins.ts';
import { credit } from '../money/wallet.ts';
import { PaymentProviderError, type CheckoutSessionFacts, type OffSessionChargeResult, type PaymentEvent } from '../ports.ts';
import { centsToMicro, formatUsd, largestTopUpCents } from './amounts.ts';
import { checkTopUpAmount, startTopUpCheckout, usdAmount } from './create-checkout.ts';
import type { Payer } from './payer.ts';
import { notCredited, outcome, type EventOutcome } from './outcome.ts';
import { settleAfterCredit } from './reversals.ts';
import { paymentProvider } from './setup.ts';

/**
 * Auto top-up (docs/payments.md, "Auto top-up"), as OpenRouter has it: the customer turns it
 * on with a threshold in coins and an amount in dollars, and saves a card at a Checkout
 * (`setup_future_usage=off_session`). When a settle leaves the account's purchased coins under
 * the threshold, an auto top-up workflow (one per account at a time) charges the card with the
 * customer away; the coins come with that payment's webhook, as for any top-up. A decline, or
 * a bank that wants the customer present, turns auto top-up off with the reason, which the
 * pages show. At most AUTO_TOPUP_MAX_PER_DAY charges in any 24 hours.
 */

/** The largest threshold: 10 million coins (10,000 USD). */
const MAX_THRESHOLD_COINS = 10_000_000;
/** A charge taken and not yet credited keeps the next one waiting this long (its webhook, or the reconciliation, credits it). */
const IN_FLIGHT_SQL = "interval '1 hour'";

export const autoTopUpInput = z
  .object({
    enabled: z.boolean().describe('true turns auto top-up on (a card is saved at a Checkout first), false turns it off'),
    threshold_coins: z
      .union([z.number(), z.string().trim().regex(/^\d{1,9}$/, 'must be a whole number of coins, such as 500').transform(Number)])
      .pipe(z.number().int('must be a whole number of coins').min(1, 'must be at least 1 coin').max(MAX_THRESHOLD_COINS, `must be at most ${MAX_THRESHOLD_COINS} coins`))
      .optional()
      .describe('charge the card when the purchased coins fall under this many'),
    amount_usd: usdAmount.optional(),
    /** Makes a retried request return the first Checkout Session. */
    idempotency_key: idempotencyKeySchema.optional(),
  })
  .superRefine((v, ctx) => {
    if (!v.enabled) return;
    if (v.threshold_coins === undefined) ctx.addIssue({ code: 'custom', path: ['threshold_coins'], message: 'is required to turn auto top-up on' });
    if (v.amount_usd === undefined) ctx.addIssue({ code: 'custom', path: ['amount_usd'], message: 'is required to turn auto top-up on' });
  });

export const autoTopUpSchema = z
  .object({
    object: z.literal('auto_top_up'),
    available: z.boolean().describe('false: payments are off, or the operator set AUTO_TOPUP_MAX_PER_DAY to 0'),
    enabled: z.boolean(),
    threshold_coins: z.number().nullable(),
    amount_usd: z.string().nullable(),
    card_saved: z.boolean().describe('a card was saved at a Checkout for charges with the customer away'),
    disabled_reason: z.string().nullable().describe('why auto top-up turned itself off (a declined card, a bank asking for the customer)'),
    disabled_at: z.string().nullable(),
    max_per_day: z.number(),
    charges_last_24h: z.number(),
    /** Set when turning it on needs a card first: send the customer there; auto top-up is on once that payment arrives. */
    checkout: z.object({ id: z.string(), url: z.string() }).nullable(),
  })
  .strict();
export type AutoTopUpView = z.infer<typeof autoTopUpSchema>;

interface SettingsRow {
  enabled: boolean;
  threshold_micro: string;
  amount_cents: string;
  customer_id: string | null;
  setup_payment_intent_id: string | null;
  payment_method_id: string | null;
  disabled_reason: string | null;
  disabled_at: Date | null;
}

const cardSaved = (s: Pick<SettingsRow, 'customer_id' | 'setup_payment_intent_id' | 'payment_method_id'> | undefined) =>
  !!s?.customer_id && !!(s.payment_method_id ?? s.setup_payment_intent_id);

/** Charges that count against the day's limit: pending, charged or credited in the last 24 hours. */
async function chargesLast24h(em: EntityManager, accountId: string): Promise<number> {
  const [row] = await em.execute<{ n: number }[]>(
    `select count(*)::int as n from auto_top_up_charges where account_id = ? and status in ('pending', 'charged', 'credited') and created_at > now() - interval '1 day'`,
    [accountId],
  );
  return row?.n ?? 0;
}

/** Auto top-up turns itself off with the reason the pages show (a decline, a bank asking for the customer). */
async function turnOff(tx: EntityManager, accountId: string, why: string): Promise<void> {
  await tx.execute('update auto_top_ups set enabled = false, disabled_reason = ?, disabled_at = now(), updated_at = now() where account_id = ?', [why, accountId]);
  forget(accountId);
}

async function settingsOf(em: EntityManager, accountId: string, lock = false): Promise<SettingsRow | undefined> {
  const [row] = await em.execute<SettingsRow[]>(
    `select enabled, threshold_micro::text, amount_cents::text, customer_id, setup_payment_intent_id, payment_method_id, disabled_reason, disabled_at
     from auto_top_ups where account_id = ?${lock ? ' for update' : ''}`,
    [accountId],
  );
  return row;
}

/** The account's auto top-up as the pages show it. */
export async function readAutoTopUp(deps: Pick<CoreDeps, 'payments' | 'config'>, em: EntityManager, accountId: string, checkout: AutoTopUpView['checkout'] = null): Promise<AutoTopUpView> {
  const s = await settingsOf(em, accountId);
  const n = await chargesLast24h(em, accountId);
  return {
    object: 'auto_top_up',
    available: deps.payments !== undefined && deps.config.payments.autoTopUpMaxPerDay > 0,
    enabled: s?.enabled ?? false,
    threshold_coins: s ? Number(BigInt(s.threshold_micro) / MICRO_PER_COIN) : null,
    amount_usd: s ? formatUsd(Number(s.amount_cents)) : null,
    card_saved: cardSaved(s),
    disabled_reason: s?.disabled_reason ?? null,
    disabled_at: s?.disabled_at ? new Date(s.disabled_at).toISOString() : null,
    max_per_day: deps.config.payments.autoTopUpMaxPerDay,
    charges_last_24h: n,
    checkout,
  };
}

/**
 * Turns auto top-up on or off. On: the threshold and amount are kept; with a card saved it is on
 * at once, otherwise the answer carries a Checkout for `amount_usd` that saves the card, and
 * auto top-up turns on when that payment is credited (creditTopUp → cardSavedAtCheckout).
 */
export async function configureAutoTopUp(
  deps: Pick<CoreDeps, 'payments' | 'config' | 'logger'>,
  em: EntityManager,
  payer: Payer,
  input: z.output<typeof autoTopUpInput>,
): Promise<AutoTopUpView> {
  const accountId = payer.accountId;
  paymentProvider(deps); // refuses while payments are off
  if (deps.config.payments.autoTopUpMaxPerDay === 0) {
    throw new CoreError('unavailable', 'Auto top-up is turned off on this server.', { reason: 'auto_top_up_unavailable' });
  }
  if (!input.enabled) {
    await em.execute('update auto_top_ups set enabled = false, updated_at = now() where account_id = ?', [accountId]);
    forget(accountId);
    return readAutoTopUp(deps, em, accountId);
  }
  const cents = checkTopUpAmount(deps.config.payments, input.amount_usd!);
  const threshold = BigInt(input.threshold_coins!) * MICRO_PER_COIN;
  const settings = await em.transactional(async (tx) => {
    await tx.execute(
      `insert into auto_top_ups (account_id, threshold_micro, amount_cents) values (?, ?::bigint, ?)
       on conflict (account_id) do update set threshold_micro = excluded.threshold_micro, amount_cents = excluded.amount_cents, updated_at = now()`,
      [accountId, threshold.toString(), cents],
    );
    const s = (await settingsOf(tx, accountId, true))!;
    if (cardSaved(s)) await tx.execute('update auto_top_ups set enabled = true, disabled_reason = null, disabled_at = null where account_id = ?', [accountId]);
    return s;
  });
  forget(accountId);
  if (cardSaved(settings)) return readAutoTopUp(deps, em, accountId);

  // No card yet: the first top-up of `amount` saves it.
  const session = await startTopUpCheckout(deps, em, accountId, cents, { idempotencyKey: input.idempotency_key, purpose: 'autotopup-setup', saveCard: true, payer });
  return readAutoTopUp(deps, em, accountId, { id: session.id, url: session.url });
}

/**
 * A paid Checkout that saved the card (creditTopUp, in the event's transaction): the card is
 * kept and auto top-up turns on with the settings the customer chose before paying.
 */
export async function cardSavedAtCheckout(tx: EntityManager, accountId: string, session: CheckoutSessionFacts): Promise<void> {
  if (!session.savesCard || !session.customerId || !session.paymentIntentId) return;
  await tx.execute(
    `update auto_top_ups set customer_id = ?, setup_payment_intent_id = ?, payment_method_id = null, enabled = true,
       disabled_reason = null, disabled_at = null, updated_at = now()
     where account_id = ?`,
    [session.customerId, session.paymentIntentId, accountId],
  );
  forget(accountId);
}

// ---------------------------------------------------------------- starting it

/**
 * Accounts known to have no auto top-up on, for 30 s: the check after every settle costs one
 * query only for accounts that use it. A change on this instance drops the entry at once; on
 * another instance it shows within 30 s.
 *
 * At most 100,000 accounts, bounded by `maxSize` (each entry counts 1) rather than `max`:
 * with `max`, lru-cache allocates its seven arrays for every entry at once, 4.2 MiB held from
 * the process's start even on an instance without payments; so they grow with use.
 */
const noAutoTopUp = new LRUCache<string, true>({ maxSize: 100_000, sizeCalculation: () => 1, ttl: 30_000 });
const forget = (accountId: string) => noAutoTopUp.delete(accountId);

/**
 * After a settle: when the account has auto top-up on and its purchased coins are now under
 * its threshold, starts its auto top-up workflow (which checks again, under a lock). Never
 * throws: a spend has already succeeded, and a failure here is logged.
 */
export async function startAutoTopUpIfLow(deps: Pick<CoreDeps, 'orm' | 'autoTopUps' | 'payments' | 'config' | 'logger'>, accountId: string): Promise<boolean> {
  if (!deps.payments || deps.config.payments.autoTopUpMaxPerDay === 0 || noAutoTopUp.has(accountId)) return false;
  try {
    const [row] = await deps.orm.em.fork().execute<{ low: boolean }[]>(
      `select w.purchased_micro < a.threshold_micro as low from auto_top_ups a join wallets w on w.account_id = a.account_id
       where a.account_id = ? and a.enabled`,
      [accountId],
    );
    if (!row) {
      noAutoTopUp.set(accountId, true);
      return false;
    }
    if (!row.low) return false;
    await deps.autoTopUps.start(accountId);
    return true;
  } catch (err) {
    deps.logger.warn({ account: accountId, err: { message: err instanceof Error ? err.message : String(err) } }, 'could not start an auto top-up');
    return false;
  }
}

// ---------------------------------------------------------------- charging

export type AutoTopUpResult = 'charged' | 'declined' | 'requires_action' | 'off' | 'no_card' | 'above_threshold' | 'in_flight' | 'daily_limit' | 'already_done';

/**
 * The auto top-up workflow's one step: charges the saved card once for `chargeId`. Retried by
 * Temporal after a failure with the same charge id, so with the same idempotency key at the
 * provider. Under the settings' row lock it checks again that auto top-up is on, the balance
 * still low, no other charge waiting for its credit, and the day's limit not reached; then
 * records the charge as pending before asking the provider.
 */
export async function runAutoTopUp(deps: Pick<CoreDeps, 'payments' | 'config' | 'logger'>, em: EntityManager, accountId: string, chargeId: string): Promise<AutoTopUpResult> {
  const provider = deps.payments;
  if (!provider) return 'off';
  const claim = await em.fork().transactional(async (tx): Promise<{ go: SettingsRow } | { done: AutoTopUpResult }> => {
    const s = await settingsOf(tx, accountId, true);
    const [existing] = await tx.execute<{ status: string }[]>('select status from auto_top_up_charges where id = ?', [chargeId]);
    // A retry of this very charge: go on with it while pending (same idempotency key), else it is done.
    if (existing) return existing.status === 'pending' && s ? { go: s } : { done: 'already_done' };
    if (!s?.enabled) return { done: 'off' };
    if (!cardSaved(s)) return { done: 'no_card' };
    const [w] = await tx.execute<{ low: boolean }[]>('select purchased_micro < ?::bigint as low from wallets where account_id = ?', [s.threshold_micro, accountId]);
    if (!w?.low) return { done: 'above_threshold' };
    const [busy] = await tx.execute<{ id: string }[]>(
      `select id from auto_top_up_charges where account_id = ? and status in ('pending', 'charged') and created_at > now() - ${IN_FLIGHT_SQL} limit 1`,
      [accountId],
    );
    if (busy) return { done: 'in_flight' };
    const n = await chargesLast24h(tx, accountId);
    if (n >= deps.config.payments.autoTopUpMaxPerDay) return { done: 'daily_limit' };
    await tx.execute(`insert into auto_top_up_charges (id, account_id, amount_cents, status) values (?, ?, ?::bigint, 'pending')`, [chargeId, accountId, s.amount_cents]);
    return { go: s };
  });
  if ('done' in claim) {
    if (claim.done === 'daily_limit') deps.logger.info({ account: accountId }, 'auto top-up skipped: the daily limit of charges is reached');
    return claim.done;
  }
  const s = claim.go;

  // The card: kept after the first charge; before it, the payment method of the Checkout that saved it.
  let paymentMethodId = s.payment_method_id;
  try {
    paymentMethodId ??= await provider.paymentMethodOf(s.setup_payment_intent_id!);
  } catch (err) {
    if (!(err instanceof PaymentProviderError) || err.kind !== 'invalid_request') throw err;
    paymentMethodId = null;
  }
  if (!paymentMethodId) return refused(em, accountId, chargeId, 'declined', null, 'The saved card could not be found: add credits again with auto top-up on to save a card.');
  if (!s.payment_method_id) await em.fork().execute('update auto_top_ups set payment_method_id = ? where account_id = ?', [paymentMethodId, accountId]);

  let result: OffSessionChargeResult;
  try {
    result = await provider.chargeOffSession({
      accountId,
      customerId: s.customer_id!,
      paymentMethodId,
      amountCents: Number(s.amount_cents),
      currency: deps.config.payments.currency,
      idempotencyKey: `autotopup:${chargeId}`,
      chargeId,
      ...(await organizationNamed(em, accountId)),
    });
  } catch (err) {
    // Stripe refused the request itself (the card was detached, the customer deleted): not worth retrying.
    if (err instanceof PaymentProviderError && err.kind === 'invalid_request') {
      deps.logger.warn({ account: accountId, charge: chargeId, err: { message: err.message } }, 'auto top-up charge refused by the payment provider');
      return refused(em, accountId, chargeId, 'declined', null, 'The payment provider refused to charge the saved card: add credits again with auto top-up on to save a card.');
    }
    throw err;
  }
  if (result.status === 'declined' || result.status === 'requires_action') return refused(em, accountId, chargeId, result.status, result.paymentId, result.reason);
  // The webhook may have credited it already (status credited): only a pending charge moves.
  await em.fork().execute(`update auto_top_up_charges set status = 'charged', payment_intent_id = coalesce(payment_intent_id, ?) where id = ? and status = 'pending'`, [result.paymentId, chargeId]);
  return 'charged';
}

/** A charge that took nothing: recorded with its reason, and auto top-up turned off with it. */
async function refused(em: EntityManager, accountId: string, chargeId: string, status: 'declined' | 'requires_action', paymentId: string | null, reason: string): Promise<AutoTopUpResult> {
  const why = status === 'requires_action' ? `${reason} Add credits yourself to confirm it, then turn auto top-up on again.` : reason;
  await em.fork().transactional(async (tx) => {
    await tx.execute(`update auto_top_up_charges set status = ?, payment_intent_id = coalesce(payment_intent_id, ?), reason = ?, ended_at = now() where id = ?`, [status, paymentId, why, chargeId]);
    await turnOff(tx, accountId, why);
  });
  return status;
}

// ---------------------------------------------------------------- the payment's webhook

type IntentEvent = Extract<PaymentEvent, { kind: 'payment_intent' }>;

/**
 * An off-session charge's PaymentIntent, in the transaction that recorded its event. Only the
 * service's own auto top-ups count (a Checkout's intent is credited through its session):
 * - succeeded: `amount_received` cents × 10 coins into the purchased pocket as `Auto top-up`
 *   (at most the largest top-up), once per intent (the ledger key and the payments row), the
 *   charge marked credited, and the refunds and disputes recorded before it taken back;
 * - failed (a charge first `processing`): the charge fails and auto top-up turns off with the reason.
 */
export async function creditAutoTopUp(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: IntentEvent): Promise<EventOutcome> {
  const i = event.intent;
  if (i.purpose !== 'auto_topup') return outcome('not_an_auto_top_up', i.accountId);
  if (event.stage === 'failed') {
    const why = `The card was not charged: ${(i.failure ?? 'the payment failed').replace(/\.$/, '')}.`;
    if (i.chargeId) await tx.execute(`update auto_top_up_charges set status = 'failed', reason = ?, ended_at = now() where id = ? and status in ('pending', 'charged')`, [why, i.chargeId]);
    if (i.accountId) await turnOff(tx, i.accountId, why);
    return outcome('auto_top_up_failed', i.accountId);
  }
  const refuse = (name: string, why: string) =>
    notCredited(tx, { outcome: name, objectId: i.id, accountId: i.accountId, why, facts: { event_id: event.eventId, account_id: i.accountId, amount_cents: i.amountReceivedCents, currency: i.currency } });
  if (i.currency !== deps.config.payments.currency) return refuse('refused_currency', `paid in ${i.currency}, not ${deps.config.payments.currency}`);
  if (i.amountReceivedCents <= 0) return refuse('refused_amount', 'the payment received nothing to credit');
  const largest = largestTopUpCents(deps.config.payments);
  if (i.amountReceivedCents > largest) return refuse('refused_amount', `${formatUsd(i.amountReceivedCents)} USD is more than the largest top-up (${formatUsd(largest)} USD): nothing credited`);
  const [account] = i.accountId ? await tx.execute<{ id: string }[]>('select id from accounts where id = ?', [i.accountId]) : [];
  if (!account) return refuse('unknown_account', i.accountId ? `no account ${i.accountId}` : 'the payment names no account');

  // The payment's lock before the wallet's (the order every step of a payment takes them in).
  await tx.execute('select mas_lock_payment(?)', [i.id]);
  const coins = centsToMicro(i.amountReceivedCents);
  const entry = await credit(tx, { accountId: account.id, kind: 'topup', amount: coins, reference: i.id, idempotencyKey: `stripe:payment_intent:${i.id}`, description: 'Auto top-up' });
  if (!entry.applied) return outcome('already_credited', account.id);
  await tx.execute(
    `insert into payments (id, checkout_session_id, source, account_id, amount_cents, currency, coins_micro, payment_intent_id, customer_id, event_id, ledger_entry_id)
     values (?, null, 'auto_top_up', ?, ?, ?, ?::bigint, ?, ?, ?, ?::bigint)`,
    [newId('pay'), account.id, i.amountReceivedCents, i.currency, coins.toString(), i.id, i.customerId, event.eventId, entry.entryId],
  );
  await tx.execute(
    `update auto_top_up_charges set status = 'credited', payment_intent_id = ?, ended_at = now() where account_id = ? and (id = ? or payment_intent_id = ?)`,
    [i.id, account.id, i.chargeId, i.id],
  );
  // Its refunds and disputes that arrived before it are taken back at once.
  await settleAfterCredit(tx, event.eventId, i.id);
  return outcome('credited', account.id);
}

/** An organization's wallet is named in its off-session charge's metadata, as in its Checkouts (payer.ts). */
async function organizationNamed(em: EntityManager, accountId: string): Promise<{ organizationId?: string }> {
  const [row] = await em.fork().execute<{ kind: string }[]>('select kind from accounts where id = ?', [accountId]);
  return row?.kind === 'organization' ? { organizationId: accountId } : {};
}
