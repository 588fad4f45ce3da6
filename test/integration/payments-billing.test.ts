import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { refusal } from '../support/refusal.ts';
import { startRecordingProxy, startTestStripeMock } from '../support/stripe-mock.ts';
import { signUpVerified } from '../support/sign-up.ts';

/**
 * The billing use cases besides the top-up checkout, against stripe-mock and PostgreSQL: a
 * plan's Checkout, the customer portal, the billing read, the top-up status of the success
 * page, and the receipts of top-ups in the history and its CSV. Refusals ask Stripe nothing
 * and write nothing.
 */
const SECRET = 'whsec_test_payments_billing';
const STARTER = { name: 'Starter', priceId: 'price_starter', coinsPerPeriod: 10_000n * 1_000_000n };
const PRO = { name: 'Pro', priceId: 'price_pro', coinsPerPeriod: 50_000n * 1_000_000n };
let orm: MikroORM;
let mock: RunningStripeMock;
let recorder: Awaited<ReturnType<typeof startRecordingProxy>>;
let deps: CoreDeps;
let offDeps: CoreDeps;
let on: Awaited<ReturnType<typeof serve>>;
let off: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  orm = await openTestOrm();
  mock = await startTestStripeMock();
  recorder = await startRecordingProxy(mock.url);
  const stripe = { STRIPE_SECRET_KEY: 'sk_test_PaymentsBilling', STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_API_URL: recorder.url, SIGNUP: 'open' };
  deps = testDeps(orm, { env: stripe, publicBaseUrl: 'https://mas.example', plans: [STARTER, PRO] });
  offDeps = testDeps(orm, { env: { SIGNUP: 'open' }, plans: [STARTER] });
  on = await serve(createTestApp({ deps }));
  off = await serve(createTestApp({ deps: offDeps }));
});
afterAll(async () => {
  await on?.close();
  await off?.close();
  await recorder?.close();
  await mock?.stop();
  await orm?.close();
});

const as = (d: CoreDeps, credential: Credential) => createCaller(createContext(d, credential));
const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;
const post = (base: string, path: string, key: string, body: unknown) =>
  getJson(`${base}/api/v1${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...bearer(key) }, body: JSON.stringify(body) });

async function written(accountId: string) {
  const [row] = await orm.em.fork().execute<{ ledger: number; payments: number; subscriptions: number }[]>(
    `select (select count(*) from ledger_entries where account_id = ?)::int as ledger, (select count(*) from payments where account_id = ?)::int as payments,
            (select count(*) from subscriptions where account_id = ?)::int as subscriptions`,
    [accountId, accountId, accountId],
  );
  return row!;
}

async function signedUp(d: CoreDeps) {
  const email = `billing-${randomBytes(6).toString('hex')}@example.com`;
  const session = await signUpVerified(d, { email, password: 'correct horse battery staple' });
  const me = await as(d, { kind: 'session', token: session.token }).accounts.me();
  return { token: session.token, accountId: me.id };
}

/** A paid top-up session's completion, signed as Stripe signs it, delivered to the webhook. */
async function payTopUp(accountId: string, cents: number, paymentIntent: string | null = unique('pi')) {
  const session = {
    id: unique('cs'),
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: accountId,
    metadata: { mas_account_id: accountId, mas_purpose: 'topup' },
    payment_status: 'paid',
    amount_total: cents,
    currency: 'usd',
    customer: 'cus_test_billing',
    payment_intent: paymentIntent,
  };
  const payload = JSON.stringify({ id: unique('evt'), object: 'event', type: 'checkout.session.completed', created: Math.floor(Date.now() / 1000), data: { object: session } });
  const res = await getJson(`${on.base}/webhooks/stripe`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET }) },
    body: payload,
  });
  expect(res.body.outcome).toBe('credited');
  return session.id;
}

async function subscribe(accountId: string, periodEnd: Date | null, ended = false) {
  const id = unique('sub');
  await orm.em.fork().execute(
    `insert into subscriptions (id, account_id, customer_id, plan_name, price_id, current_period_end, ended_at) values (?, ?, 'cus_test_sub', 'Starter', 'price_starter', ?, ?)`,
    [id, accountId, periodEnd, ended ? new Date() : null],
  );
  return id;
}

describe('POST /api/v1/credits/subscription', () => {
  it('answers a Checkout Session in subscription mode for the plan’s price, made for the account; it grants nothing', async () => {
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    recorder.requests.length = 0;
    const res = await post(on.base, '/credits/subscription', key, { plan: 'starter' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ object: 'checkout_session', id: expect.stringMatching(/^cs_/), url: expect.stringMatching(/^https:\/\//) });
    const sent = recorder.requests.find((r) => r.path === '/v1/checkout/sessions')!;
    expect(Object.fromEntries(sent.body)).toMatchObject({
      mode: 'subscription',
      client_reference_id: account.id,
      'metadata[mas_purpose]': 'subscription',
      'subscription_data[metadata][mas_account_id]': account.id,
      'line_items[0][price]': 'price_starter',
      success_url: 'https://mas.example/account/billing?checkout=subscribed',
      cancel_url: 'https://mas.example/account/billing?checkout=canceled',
    });
    expect(await written(account.id)).toEqual({ ledger: 0, payments: 0, subscriptions: 0 });
  });

  it('refuses an unknown or missing plan with 400 naming plan, and a running subscription with 409, asking Stripe nothing and writing nothing', async () => {
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    recorder.requests.length = 0;
    const unknown = await post(on.base, '/credits/subscription', key, { plan: 'Gold' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error).toEqual({ type: 'invalid_request_error', param: 'plan', code: 'unknown_plan', message: expect.stringMatching(/^There is no plan named "Gold"\. The plans are: Starter, Pro\.$/) });
    const missing = await post(on.base, '/credits/subscription', key, {});
    expect(missing.status).toBe(400);
    expect(missing.body.error.message).toMatch(/'plan'/);
    const tooLong = await post(on.base, '/credits/subscription', key, { plan: 'x'.repeat(101) });
    expect(tooLong.status).toBe(400);
    expect(recorder.requests).toHaveLength(0);
    expect(await written(account.id)).toEqual({ ledger: 0, payments: 0, subscriptions: 0 });

    await subscribe(account.id, new Date('2030-01-01T00:00:00Z'));
    const again = await post(on.base, '/credits/subscription', key, { plan: 'Pro' });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: 'already_subscribed', message: expect.stringMatching(/already has a subscription \(Starter\)/) });
    expect(recorder.requests).toHaveLength(0);
  });

  it('answers 403 payments_not_configured with payments off (a refusal, not a server error), writing nothing', async () => {
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    const res = await post(off.base, '/credits/subscription', key, { plan: 'Starter' });
    expect(res.status).toBe(403);
    expect(res.body.error.type).toBe('permission_error');
    expect(res.body.error.code).toBe('payments_not_configured');
    expect(await written(account.id)).toEqual({ ledger: 0, payments: 0, subscriptions: 0 });
  });
});

describe('the customer portal', () => {
  it('is refused to an account that never paid, and opens for the customer of its subscription', async () => {
    const { token, accountId } = await signedUp(deps);
    const me = as(deps, { kind: 'session', token });
    recorder.requests.length = 0;
    expect(await refusal(me.payments.portal())).toMatchObject({ code: 'conflict', reason: 'no_billing_customer', message: expect.stringMatching(/has not paid through Stripe yet/) });
    expect(recorder.requests).toHaveLength(0);

    await subscribe(accountId, new Date('2030-01-01T00:00:00Z'));
    const link = await me.payments.portal();
    expect(link).toEqual({ object: 'billing_portal', url: expect.stringMatching(/^https:\/\//) });
    const sent = recorder.requests.find((r) => r.path === '/v1/billing_portal/sessions')!;
    expect(Object.fromEntries(sent.body)).toEqual({ customer: 'cus_test_sub', return_url: 'https://mas.example/account/billing' });
    expect(await refusal(as(offDeps, { kind: 'session', token }).payments.portal())).toMatchObject({ reason: 'payments_not_configured' });
  });
});

describe('the billing read, the top-up status and receipts', () => {
  it('says what may be paid, the plans, the subscription with its renewal, and the top-ups with their receipts', async () => {
    const { token, accountId } = await signedUp(deps);
    const me = as(deps, { kind: 'session', token });
    const empty = await me.payments.billing();
    expect(empty).toEqual({
      object: 'billing',
      payments_enabled: true,
      currency: 'usd',
      coins_per_usd: 1000,
      topup_min_usd: '5.00',
      topup_max_usd: '10000.00',
      plans: [
        { name: 'Starter', coins_per_period: 10_000, price_usd: null, period: null },
        { name: 'Pro', coins_per_period: 50_000, price_usd: null, period: null },
      ],
      subscription: null,
      can_manage_billing: false,
      payments: [],
    });

    const sessionId = await payTopUp(accountId, 1234);
    await subscribe(accountId, new Date('2030-01-01T00:00:00Z'));
    const billing = await me.payments.billing();
    expect(billing.subscription).toEqual({ id: expect.stringMatching(/^sub_/), plan: 'Starter', status: 'active', current_period_end: '2030-01-01T00:00:00.000Z', ended_at: null });
    expect(billing.can_manage_billing).toBe(true);
    // stripe-mock answers every PaymentIntent with its fixture charge, whose receipt_url is a Stripe receipt page.
    expect(billing.payments).toEqual([
      { id: expect.stringMatching(/^pay_/), source: 'checkout', checkout_session_id: sessionId, amount_usd: '12.34', coins: 12_340, created_at: expect.any(String), receipt_url: expect.stringMatching(/^https:\/\/.+\/receipts\//) },
    ]);

    const history = await me.account.history({ limit: 10 });
    expect(history.data).toHaveLength(1);
    expect(history.data[0]).toMatchObject({ type: 'topup', reference: sessionId, amount_coins: 12_340, receipt_url: billing.payments[0]!.receipt_url });
    const csv = await me.account.historyCsv();
    const [header, row] = csv.csv.trim().split('\r\n');
    expect(header!.split(',')[8]).toBe('receipt_url');
    expect(row!.split(',')[8]).toBe(billing.payments[0]!.receipt_url);
    expect(row!.split(',')[9]).toBe('Card payment of 12.34 USD');

    // The same read with an API key.
    const key = (await makeKey(orm, accountId)).key;
    const rest = await getJson(`${on.base}/api/v1/credits/billing`, { headers: bearer(key) });
    expect(rest.status).toBe(200);
    expect(rest.body).toEqual(JSON.parse(JSON.stringify(billing)));
  });

  it('shows an ended subscription as canceled with no renewal; with payments off, says so', async () => {
    const { token, accountId } = await signedUp(deps);
    await subscribe(accountId, new Date('2030-01-01T00:00:00Z'), true);
    const billing = await as(deps, { kind: 'session', token }).payments.billing();
    expect(billing.subscription).toMatchObject({ status: 'canceled', current_period_end: null, ended_at: expect.any(String) });
    expect(await as(offDeps, { kind: 'session', token }).payments.billing()).toMatchObject({ payments_enabled: false, plans: [{ name: 'Starter', coins_per_period: 10_000 }] });
  });

  it('a top-up reads as credited only once its webhook has credited it, and only for its own account', async () => {
    const a = await signedUp(deps);
    const b = await signedUp(deps);
    const pending = await as(deps, { kind: 'session', token: a.token }).payments.topUpStatus({ session_id: 'cs_test_not_yet' });
    expect(pending).toEqual({ object: 'top_up_status', session_id: 'cs_test_not_yet', credited: false, coins: null, amount_usd: null });
    const sessionId = await payTopUp(a.accountId, 500, null);
    expect(await as(deps, { kind: 'session', token: a.token }).payments.topUpStatus({ session_id: sessionId })).toEqual({
      object: 'top_up_status',
      session_id: sessionId,
      credited: true,
      coins: 5000,
      amount_usd: '5.00',
    });
    expect((await as(deps, { kind: 'session', token: b.token }).payments.topUpStatus({ session_id: sessionId })).credited).toBe(false);
    expect(await refusal(as(deps, { kind: 'session', token: a.token }).payments.topUpStatus({ session_id: 'cs_<script>' }))).toMatchObject({ code: 'invalid_request', param: 'session_id' });
  });
});
