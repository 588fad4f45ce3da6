import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GenerationStarter } from '../../core/ports.ts';
import { reserve, settle } from '../../core/money/holds.ts';
import { credit, getBalance } from '../../core/money/wallet.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, walletInvariants } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';

/**
 * Refunds and disputes of top-ups (docs/payments.md, "Refunds and disputes") through the real
 * HTTP app and PostgreSQL: signed `charge.refunded` and `charge.dispute.*` fixtures (the SDK's
 * generateTestHeaderString) after a signed top-up. Every expectation is computed here from
 * cents: 1 cent = 10 coins = 10,000,000 micro-coins. No call reaches the Stripe API.
 */
const SECRET = 'whsec_test_payments_refunds';
const MICRO_PER_CENT = 10n * 1_000_000n;
const micro = (cents: number) => BigInt(cents) * MICRO_PER_CENT;

let orm: MikroORM;
let upstream: FakeUpstream;
let api: Awaited<ReturnType<typeof serve>>;
const started: string[] = [];
beforeAll(async () => {
  orm = await openTestOrm(20);
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  const generations: GenerationStarter = {
    start: async (job) => {
      started.push(job.jobId);
    },
    cancel: async () => {},
    state: async () => ({ state: 'open' }),
    deliverWebhook: async () => {},
  };
  const deps = testDeps(orm, { providers, generations, env: { STRIPE_SECRET_KEY: 'sk_test_PaymentsRefunds', STRIPE_WEBHOOK_SECRET: SECRET } });
  api = await serve(createTestApp({ deps }));
});
afterAll(async () => {
  await api?.close();
  await upstream?.close();
  await orm?.close();
});

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;

function eventOf(type: string, object: object, id = unique('evt')): string {
  return JSON.stringify({ id, object: 'event', api_version: Stripe.API_VERSION, type, created: Math.floor(Date.now() / 1000), livemode: false, data: { object } });
}

async function deliver(payload: string): Promise<string> {
  const signature = Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET, timestamp: Math.floor(Date.now() / 1000) });
  const res = await getJson(`${api.base}/webhooks/stripe`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': signature }, body: payload });
  expect(res.status).toBe(200);
  return res.body.outcome as string;
}

/** A paid top-up of `cents`, credited through the webhook; answers its ids. */
async function topUp(accountId: string, cents: number) {
  const session = {
    id: unique('cs'),
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: accountId,
    metadata: { mas_account_id: accountId, mas_purpose: 'topup' },
    payment_status: 'paid',
    status: 'complete',
    amount_total: cents,
    currency: 'usd',
    customer: 'cus_test_refunds',
    payment_intent: unique('pi'),
  };
  expect(await deliver(eventOf('checkout.session.completed', session))).toBe('credited');
  return { sessionId: session.id, paymentIntent: session.payment_intent, chargeId: unique('ch'), cents };
}

type Payment = Awaited<ReturnType<typeof topUp>>;
const refunded = (p: Payment, amountRefunded: number) =>
  eventOf('charge.refunded', { id: p.chargeId, object: 'charge', payment_intent: p.paymentIntent, amount: p.cents, amount_refunded: amountRefunded, currency: 'usd', refunded: amountRefunded === p.cents });
const dispute = (p: Payment, type: 'created' | 'closed', d: { id: string; cents: number; status: string }) =>
  eventOf(`charge.dispute.${type}`, { id: d.id, object: 'dispute', charge: p.chargeId, payment_intent: p.paymentIntent, amount: d.cents, currency: 'usd', status: d.status });

async function ledger(accountId: string) {
  return orm.em.fork().execute<{ kind: string; pocket: string; amount: string; after: string; reference: string; description: string }[]>(
    'select kind, pocket, amount_micro::text as amount, balance_after_micro::text as after, reference, description from ledger_entries where account_id = ? order by id',
    [accountId],
  );
}

/** The payment's steps, in order; `step` is n of its key `stripe:reversal:<payment id>:<n>`. */
async function reversals(sessionId: string) {
  const rows = await orm.em.fork().execute<{ kind: string; amount_cents: number; coins_micro: string; provider_object_id: string; step_key: string; payment_id: string }[]>(
    `select r.kind, r.amount_cents::int, r.coins_micro::text, r.provider_object_id, r.step_key, r.payment_id from payment_reversals r join payments p on p.id = r.payment_id
     where p.checkout_session_id = ? order by r.created_at, r.id`,
    [sessionId],
  );
  return rows.map(({ step_key, payment_id, ...r }) => ({ ...r, step: step_key.startsWith(`stripe:reversal:${payment_id}:`) ? Number(step_key.split(':').at(-1)) : step_key }));
}

async function audits(sessionId: string) {
  const rows = await orm.em.fork().execute<{ action: string; actor_type: string }[]>(
    `select action, actor_type from admin_audit_log where target_type = 'payment' and target_id = ? order by id`,
    [sessionId],
  );
  return rows.map((r) => `${r.actor_type}:${r.action}`);
}

/** The balance and the ledger agree (the sum of every pocket's entries is the pocket). */
async function expectExact(accountId: string, purchased: bigint, subscription = 0n) {
  const state = await walletInvariants(orm, accountId);
  expect(state.balance).toMatchObject({ purchased, subscription, held: 0n });
  expect(state.ledgerByPocket).toEqual({ subscription, purchased, held: 0n });
}

describe('charge.refunded', () => {
  it('a partial refund takes back its cents × 10 coins, a full one the rest; replays and an older event after a newer one take nothing', async () => {
    const account = await makeAccount(orm);
    const p = await topUp(account.id, 2000);
    await expectExact(account.id, micro(2000));

    const partial = refunded(p, 500);
    expect(await deliver(partial)).toBe('refunded');
    await expectExact(account.id, micro(2000) - micro(500));
    expect(await deliver(partial)).toBe('duplicate_event');
    expect(await deliver(refunded(p, 500))).toBe('already_refunded');
    await expectExact(account.id, micro(1500));

    const full = refunded(p, 2000);
    // The full refund, 10 times at once and once more under another event id: one step.
    const answers = await Promise.all([...Array.from({ length: 10 }, () => deliver(full)), deliver(refunded(p, 2000))]);
    expect(answers.sort()).toEqual(['already_refunded', 'refunded', ...Array(9).fill('duplicate_event')].sort());
    await expectExact(account.id, 0n);
    // Stripe delivered the partial refund's event late, under a new id: nothing.
    expect(await deliver(refunded(p, 500))).toBe('already_refunded');
    await expectExact(account.id, 0n);

    expect(await ledger(account.id)).toEqual([
      { kind: 'topup', pocket: 'purchased', amount: micro(2000).toString(), after: micro(2000).toString(), reference: p.sessionId, description: 'Top-up' },
      { kind: 'payment_reversal', pocket: 'purchased', amount: (-micro(500)).toString(), after: micro(1500).toString(), reference: p.chargeId, description: 'Refund (Stripe)' },
      { kind: 'payment_reversal', pocket: 'purchased', amount: (-micro(1500)).toString(), after: '0', reference: p.chargeId, description: 'Refund (Stripe)' },
    ]);
    expect(await reversals(p.sessionId)).toEqual([
      { kind: 'refund', amount_cents: 500, coins_micro: (-micro(500)).toString(), provider_object_id: p.chargeId, step: 1 },
      { kind: 'refund', amount_cents: 1500, coins_micro: (-micro(1500)).toString(), provider_object_id: p.chargeId, step: 2 },
    ]);
    expect(await audits(p.sessionId)).toEqual(['internal:payment.refunded', 'internal:payment.refunded']);

    // The customer's history labels each step, and in words names the card payment it takes back (docs/accounts.md).
    const key = (await makeKey(orm, account.id)).key;
    const history = await getJson(`${api.base}/api/v1/wallet/history`, { headers: bearer(key) });
    expect(history.body.data.map((r: { type: string; description: string; amount_coins: number; details: string }) => [r.type, r.description, r.amount_coins, r.details])).toEqual([
      ['adjustment', 'Refund (Stripe)', -15000, 'Refund (Stripe) of the card payment of 20.00 USD'],
      ['adjustment', 'Refund (Stripe)', -5000, 'Refund (Stripe) of the card payment of 20.00 USD'],
      ['topup', 'Top-up', 20000, 'Card payment of 20.00 USD'],
    ]);
  });

  it('a refund of a payment the service has not credited takes nothing now, is kept for its credit, and is audited for an operator', async () => {
    const chargeId = unique('ch');
    const outcome = await deliver(eventOf('charge.refunded', { id: chargeId, object: 'charge', payment_intent: unique('pi'), amount: 900, amount_refunded: 900, currency: 'usd' }));
    expect(outcome).toBe('reversal_pending');
    expect(await audits(chargeId)).toEqual(['internal:payment.reversal_pending']);
    // An event that names no payment at all: nothing to keep it for.
    const orphan = unique('ch');
    expect(await deliver(eventOf('charge.refunded', { id: orphan, object: 'charge', payment_intent: null, amount: 900, amount_refunded: 900, currency: 'usd' }))).toBe('unknown_payment');
    expect(await audits(orphan)).toEqual(['internal:payment.not_credited']);
  });
});

describe('disputes', () => {
  it('a lost dispute takes the disputed coins back at its creation, below zero when they were spent; the pocket then refuses a chat and a media job with 402', async () => {
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    const p = await topUp(account.id, 1000);
    // 4000 of the 10,000 coins are spent, and the account also has 50,000 subscription coins.
    const em = orm.em.fork();
    const { holdId } = await reserve(em, { accountId: account.id, amount: 4000n * 1_000_000n, reference: 'spent', expiresAt: new Date(Date.now() + 60_000) });
    await settle(em, holdId, 4000n * 1_000_000n);
    await credit(orm.em.fork(), { accountId: account.id, kind: 'subscription_grant', amount: 50_000n * 1_000_000n, reference: 'grant', idempotencyKey: `grant:${account.id}`, description: 'Subscription coins' });
    // The reservation took the 4000 from the purchased pocket (no subscription coins then).
    await expectExact(account.id, micro(1000) - 4000n * 1_000_000n, 50_000n * 1_000_000n);

    const d = { id: unique('dp'), cents: 1000, status: 'needs_response' };
    const created = dispute(p, 'created', d);
    expect(await deliver(created)).toBe('dispute_taken');
    expect(await deliver(created)).toBe('duplicate_event');
    const negative = micro(1000) - 4000n * 1_000_000n - micro(1000);
    expect(negative).toBe(-4000n * 1_000_000n);
    await expectExact(account.id, negative, 50_000n * 1_000_000n);

    // Spending is refused while the purchased pocket is negative, though subscription coins would cover it.
    const chat = await getJson(`${api.base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/ok', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
    });
    expect(chat.status).toBe(402);
    expect(chat.body.error).toMatchObject({ type: 'billing_error', code: 'negative_balance' });
    expect(chat.body.error.message).toMatch(/below zero.*refunded or disputed/);
    const before = started.length;
    const job = await getJson(`${api.base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/image', prompt: 'x' }),
    });
    expect(job.status).toBe(402);
    expect(job.body.error.code).toBe('negative_balance');
    expect(started.length).toBe(before);
    expect(upstream.requests.filter((r) => JSON.stringify(r).includes('"hi"'))).toEqual([]);
    await expectExact(account.id, negative, 50_000n * 1_000_000n);

    // Lost: nothing more is taken (the creation took it); replayed, nothing either.
    const lost = dispute(p, 'closed', { ...d, status: 'lost' });
    expect(await deliver(lost)).toBe('dispute_lost');
    expect(await deliver(lost)).toBe('duplicate_event');
    await expectExact(account.id, negative, 50_000n * 1_000_000n);
    expect((await ledger(account.id)).filter((e) => e.kind === 'payment_reversal')).toEqual([
      { kind: 'payment_reversal', pocket: 'purchased', amount: (-micro(1000)).toString(), after: negative.toString(), reference: d.id, description: 'Dispute' },
    ]);
    expect(await audits(p.sessionId)).toEqual(['internal:payment.disputed', 'internal:payment.dispute_lost']);

    // A top-up that brings the pocket back above zero opens spending again.
    await topUp(account.id, 500);
    await expectExact(account.id, negative + micro(500), 50_000n * 1_000_000n);
    const again = await getJson(`${api.base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test/image', prompt: 'x' }),
    });
    expect(again.status).toBe(202);
  });

  it('a lost dispute whose creation was never delivered takes the coins at the loss, once', async () => {
    const account = await makeAccount(orm);
    const p = await topUp(account.id, 700);
    const d = { id: unique('dp'), cents: 300, status: 'lost' };
    expect(await deliver(dispute(p, 'closed', d))).toBe('dispute_lost');
    expect(await deliver(dispute(p, 'closed', d))).toBe('dispute_lost');
    await expectExact(account.id, micro(700) - micro(300));
    expect(await reversals(p.sessionId)).toEqual([{ kind: 'dispute', amount_cents: 300, coins_micro: (-micro(300)).toString(), provider_object_id: d.id, step: 1 }]);
  });

  it('a won dispute gives the coins back, once', async () => {
    const account = await makeAccount(orm);
    const p = await topUp(account.id, 1000);
    const d = { id: unique('dp'), cents: 600, status: 'needs_response' };
    expect(await deliver(dispute(p, 'created', d))).toBe('dispute_taken');
    await expectExact(account.id, micro(1000) - micro(600));
    const won = dispute(p, 'closed', { ...d, status: 'won' });
    expect(await deliver(won)).toBe('dispute_won');
    expect(await deliver(won)).toBe('duplicate_event');
    expect(await deliver(dispute(p, 'closed', { ...d, status: 'won' }))).toBe('already_given_back');
    await expectExact(account.id, micro(1000));
    expect((await ledger(account.id)).map((e) => [e.description, e.amount, e.after])).toEqual([
      ['Top-up', micro(1000).toString(), micro(1000).toString()],
      ['Dispute', (-micro(600)).toString(), micro(400).toString()],
      ['Dispute won', micro(600).toString(), micro(1000).toString()],
    ]);
    expect(await audits(p.sessionId)).toEqual(['internal:payment.disputed', 'internal:payment.dispute_won']);
    // In the history, in words: each step names the card payment, beside the account's other top-up.
    await topUp(account.id, 250);
    const key = (await makeKey(orm, account.id)).key;
    const history = await getJson(`${api.base}/api/v1/wallet/history`, { headers: bearer(key) });
    expect(history.body.data.map((r: { details: string }) => r.details)).toEqual([
      'Card payment of 2.50 USD',
      'Dispute won of the card payment of 10.00 USD',
      'Dispute of the card payment of 10.00 USD',
      'Card payment of 10.00 USD',
    ]);
  });

  it('an inquiry (warning_needs_response) takes nothing', async () => {
    const account = await makeAccount(orm);
    const p = await topUp(account.id, 1000);
    expect(await deliver(dispute(p, 'created', { id: unique('dp'), cents: 1000, status: 'warning_needs_response' }))).toBe('dispute_inquiry');
    await expectExact(account.id, micro(1000));
    expect((await getBalance(orm.em.fork(), account.id)).paid).toBe(true);
  });
});
