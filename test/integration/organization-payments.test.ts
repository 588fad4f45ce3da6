import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { getBalance } from '../../core/money/wallet.ts';
import { createCaller } from '../../core/router.ts';
import { csrfOf, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { refusal } from '../support/refusal.ts';
import { startRecordingProxy, startTestStripeMock } from '../support/stripe-mock.ts';

/**
 * Payments for an organization's wallet (issue 49; docs/payments.md, docs/organizations.md) over
 * real HTTP: the owner's billing page and its forms, Checkout Sessions made at stripe-mock
 * (through a proxy that records what the service sent Stripe), and signed webhook deliveries
 * (the SDK's generateTestHeaderString) that credit, refund and dispute the organization's wallet,
 * never the owner's own. Who may pay: owners signed in; not admins, members, strangers or keys.
 * 1 cent = 10 coins = 10,000,000 micro-coins.
 */
const SECRET = 'whsec_test_organization_payments';
const MICRO_PER_CENT = 10n * 1_000_000n;
const STARTER = { name: 'Starter', priceId: 'price_org_starter', coinsPerPeriod: 10_000n * 1_000_000n };

let orm: MikroORM;
let mock: RunningStripeMock;
let recorder: Awaited<ReturnType<typeof startRecordingProxy>>;
let deps: CoreDeps;
let api: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  orm = await openTestOrm();
  mock = await startTestStripeMock();
  recorder = await startRecordingProxy(mock.url);
  deps = testDeps(orm, {
    env: { STRIPE_SECRET_KEY: 'sk_test_OrganizationPayments', STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_API_URL: recorder.url, SIGNUP: 'open' },
    publicBaseUrl: 'https://mas.example',
    plans: [STARTER],
  });
  api = await serve(createTestApp({ deps, publicBaseUrl: 'https://mas.example' }));
});
afterAll(async () => {
  await api?.close();
  await recorder?.close();
  await mock?.stop();
  await orm?.close();
});

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;
const asPerson = (p: Person) => createCaller(createContext(deps, { kind: 'session', token: p.session }));
const asKey = (key: string) => createCaller(createContext(deps, { kind: 'bearer', token: key }));
const purchased = async (accountId: string) => (await getBalance(orm.em.fork(), accountId)).purchased;

async function deliver(type: string, object: object): Promise<string> {
  const payload = JSON.stringify({ id: unique('evt'), object: 'event', api_version: Stripe.API_VERSION, type, created: Math.floor(Date.now() / 1000), livemode: false, data: { object } });
  const signature = Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET, timestamp: Math.floor(Date.now() / 1000) });
  const res = await getJson(`${api.base}/webhooks/stripe`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': signature }, body: payload });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.outcome as string;
}

/** An owner with an organization, and a second person in it with `role`. */
async function organizationWith(role: 'admin' | 'member') {
  const owner = await signUpPerson(api.base, orm, 'org-pay-owner');
  const other = await signUpPerson(api.base, orm, `org-pay-${role}`);
  const org = await asPerson(owner).organizations.create({ name: `Team ${randomBytes(3).toString('hex')}` });
  await orm.em.fork().execute(`insert into organization_members (organization_id, account_id, role) values (?, ?, ?)`, [org.id, other.accountId, role]);
  return { owner, other, org };
}

/** The owner pays on the organization's billing page: the form posts to /account/credits and is sent on to Stripe. */
async function ownerChecksOut(owner: Person, orgId: string, amountUsd: string) {
  const page = await owner.browser.fetch(`/account/billing?organization=${orgId}`);
  const html = await page.text();
  expect(page.status, html.slice(0, 300)).toBe(200);
  expect(html).toContain(`name="organization_id" value="${orgId}"`);
  recorder.requests.length = 0;
  const res = await owner.browser.post('/account/credits', { _csrf: csrfOf(html)!, organization_id: orgId, amount_usd: amountUsd, idempotency_key: unique('idem') });
  expect(res.status).toBe(303);
  expect(res.headers.get('location')).toMatch(/^https:\/\//);
  const sent = recorder.requests.filter((r) => r.method === 'POST' && r.path === '/v1/checkout/sessions');
  expect(sent).toHaveLength(1);
  return Object.fromEntries(sent[0]!.body) as Record<string, string>;
}

/** Stripe's completion of that Checkout Session, paid, as the service made it: the metadata it sent. */
async function paid(sent: Record<string, string>, cents: number) {
  const session = {
    id: unique('cs'),
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: sent.client_reference_id,
    metadata: { mas_account_id: sent['metadata[mas_account_id]'], mas_purpose: sent['metadata[mas_purpose]'], mas_organization_id: sent['metadata[mas_organization_id]'] },
    payment_status: 'paid',
    status: 'complete',
    amount_total: cents,
    currency: 'usd',
    customer: unique('cus'),
    payment_intent: unique('pi'),
  };
  expect(await deliver('checkout.session.completed', session)).toBe('credited');
  return { sessionId: session.id, paymentIntent: session.payment_intent, chargeId: unique('ch'), cents };
}

describe("an organization's payments", () => {
  it("an owner tops up the organization's wallet from its billing page: Stripe's metadata names it, the webhook credits it and not the owner", async () => {
    const { owner, org } = await organizationWith('member');
    const sent = await ownerChecksOut(owner, org.id, '12.34');
    expect(sent).toMatchObject({
      mode: 'payment',
      client_reference_id: org.id,
      'metadata[mas_account_id]': org.id,
      'metadata[mas_purpose]': 'topup',
      'metadata[mas_organization_id]': org.id,
      'metadata[mas_acting_account_id]': owner.accountId,
      'payment_intent_data[metadata][mas_organization_id]': org.id,
      'line_items[0][price_data][unit_amount]': '1234',
      // The organization is its own Stripe customer; its billing address is its row's (its maker's).
      customer_creation: 'always',
      customer_email: owner.email,
      success_url: `https://mas.example/account/credits/success?session_id={CHECKOUT_SESSION_ID}&organization=${org.id}`,
      cancel_url: `https://mas.example/account/billing?checkout=canceled&organization=${org.id}`,
    });

    const ownBefore = await purchased(owner.accountId);
    const payment = await paid(sent, 1234);
    expect(await purchased(org.id)).toBe(1234n * MICRO_PER_CENT);
    expect(await purchased(owner.accountId)).toBe(ownBefore);
    const [row] = await orm.em.fork().execute<{ account_id: string }[]>('select account_id from payments where checkout_session_id = ?', [payment.sessionId]);
    expect(row!.account_id).toBe(org.id);

    // The success page and the billing read answer for the organization's wallet; the owner's own shows nothing of it.
    const success = await owner.browser.fetch(`/account/credits/success?session_id=${payment.sessionId}&organization=${org.id}`);
    expect(await success.text()).toContain("12,340 coins were added to the organization's wallet");
    const billing = await asPerson(owner).payments.billing({ organization_id: org.id });
    expect(billing.payments.map((p) => p.checkout_session_id)).toEqual([payment.sessionId]);
    expect((await asPerson(owner).payments.billing()).payments).toEqual([]);
    const page = await (await owner.browser.fetch(`/account/billing?organization=${org.id}`)).text();
    expect(page).toContain(org.name);
    expect(page).toContain('12,340');
  });

  it("an owner's plan for the organization is its own: Stripe's metadata and the invoice's grant name the organization", async () => {
    const { owner, org } = await organizationWith('member');
    recorder.requests.length = 0;
    await asPerson(owner).payments.subscribe({ plan: 'Starter', organization_id: org.id });
    const sent = Object.fromEntries(recorder.requests.find((r) => r.path === '/v1/checkout/sessions')!.body);
    expect(sent).toMatchObject({ mode: 'subscription', client_reference_id: org.id, 'metadata[mas_organization_id]': org.id, 'subscription_data[metadata][mas_account_id]': org.id, customer_email: owner.email });
    const invoice = {
      id: unique('in'),
      object: 'invoice',
      status: 'paid',
      customer: unique('cus'),
      amount_paid: 1000,
      currency: 'usd',
      parent: { type: 'subscription_details', subscription_details: { subscription: unique('sub'), metadata: { mas_account_id: org.id, mas_purpose: 'subscription', mas_organization_id: org.id } } },
      lines: { data: [{ period: { start: 1_800_000_000, end: 1_802_592_000 }, pricing: { price_details: { price: STARTER.priceId } } }] },
    };
    expect(await deliver('invoice.paid', invoice)).toBe('credited');
    expect((await getBalance(orm.em.fork(), org.id)).subscription).toBe(STARTER.coinsPerPeriod);
    expect((await getBalance(orm.em.fork(), owner.accountId)).subscription).toBe(0n);
  });

  it("an owner turns on auto top-up for the organization: the card-saving Checkout names it, and the settings are the organization's", async () => {
    const { owner, org } = await organizationWith('member');
    recorder.requests.length = 0;
    const auto = await asPerson(owner).payments.configureAutoTopUp({ enabled: true, threshold_coins: 1000, amount_usd: '5', organization_id: org.id });
    expect(auto.checkout?.url).toMatch(/^https:\/\//);
    const sent = Object.fromEntries(recorder.requests.find((r) => r.path === '/v1/checkout/sessions')!.body);
    expect(sent).toMatchObject({ client_reference_id: org.id, 'metadata[mas_organization_id]': org.id, 'metadata[mas_saves_card]': 'auto_topup', 'payment_intent_data[setup_future_usage]': 'off_session' });
    const rows = await orm.em.fork().execute<{ account_id: string }[]>('select account_id from auto_top_ups where account_id in (?, ?)', [org.id, owner.accountId]);
    expect(rows).toEqual([{ account_id: org.id }]);
    expect((await asPerson(owner).payments.autoTopUp({ organization_id: org.id })).threshold_coins).toBe(1000);
    expect((await asPerson(owner).payments.autoTopUp()).threshold_coins).toBeNull();
  });

  it("refunds and disputes of an organization's payment are taken from the organization's wallet", async () => {
    const { owner, org } = await organizationWith('member');
    const p = await paid(await ownerChecksOut(owner, org.id, '20'), 2000);
    const ownBefore = await purchased(owner.accountId);
    expect(await purchased(org.id)).toBe(2000n * MICRO_PER_CENT);

    const refund = { id: p.chargeId, object: 'charge', payment_intent: p.paymentIntent, amount: p.cents, amount_refunded: 500, currency: 'usd', refunded: false };
    expect(await deliver('charge.refunded', refund)).toBe('refunded');
    expect(await purchased(org.id)).toBe(1500n * MICRO_PER_CENT);

    const dispute = { id: unique('dp'), object: 'dispute', charge: p.chargeId, payment_intent: p.paymentIntent, amount: 1500, currency: 'usd', status: 'needs_response' };
    expect(await deliver('charge.dispute.created', dispute)).toBe('dispute_taken');
    expect(await purchased(org.id)).toBe(0n);
    expect(await purchased(owner.accountId)).toBe(ownBefore);
    // The top-up and its two reversals, all three in the organization's ledger.
    const entries = await orm.em.fork().execute<{ kind: string }[]>(`select kind from ledger_entries where account_id = ? order by id`, [org.id]);
    expect(entries).toHaveLength(3);
  });

  it('refuses everyone but an owner signed in: an admin gets 403, a stranger 404, an organization key or any key with organization_id 403; Stripe is asked nothing', async () => {
    const { owner, other: admin, org } = await organizationWith('admin');
    const stranger = await signUpPerson(api.base, orm, 'org-pay-stranger');
    recorder.requests.length = 0;

    const byAdmin = await refusal(asPerson(admin).payments.checkout({ amount_usd: '20', organization_id: org.id }));
    expect(byAdmin).toMatchObject({ code: 'forbidden', reason: 'owner_role_required' });
    const byStranger = await refusal(asPerson(stranger).payments.billing({ organization_id: org.id }));
    expect(byStranger).toMatchObject({ code: 'not_found', reason: 'organization_not_found', param: 'organization_id' });
    for (const call of [asPerson(admin).payments.autoTopUp({ organization_id: org.id }), asPerson(admin).payments.portal({ organization_id: org.id }), asPerson(admin).payments.subscribe({ plan: 'Starter', organization_id: org.id })]) {
      expect((await refusal(call)).code).toBe('forbidden');
    }

    // The billing page: a notice and 403 for the admin, 404 for a stranger; the form posted anyway is refused too.
    const adminPage = await admin.browser.fetch(`/account/billing?organization=${org.id}`);
    expect(adminPage.status).toBe(403);
    expect(await adminPage.text()).toContain('Only an organization');
    expect((await stranger.browser.fetch(`/account/billing?organization=${org.id}`)).status).toBe(404);
    const csrf = csrfOf(await (await admin.browser.fetch('/account/billing')).text())!;
    expect((await admin.browser.post('/account/credits', { _csrf: csrf, organization_id: org.id, amount_usd: '20' })).status).toBe(403);

    // A key of the organization's wallet (here the owner's own) is not an owner: REST and core refuse it.
    const orgKey = await asPerson(owner).account.keys.create({ name: 'org key', organization_id: org.id });
    const rest = await getJson(`${api.base}/api/v1/credits/checkout`, { method: 'POST', headers: { 'content-type': 'application/json', ...bearer(orgKey.key) }, body: JSON.stringify({ amount_usd: 20 }) });
    expect(rest.status).toBe(403);
    expect(rest.body.error.code).toBe('organization_key_cannot_pay');
    expect((await refusal(asKey(orgKey.key).payments.billing())).reason).toBe('organization_key_cannot_pay');
    // A personal key naming the organization: paying for it is an owner's act in the pages.
    const personalKey = (await makeKey(orm, owner.accountId)).key;
    expect(await refusal(asKey(personalKey).payments.checkout({ amount_usd: '20', organization_id: org.id }))).toMatchObject({ code: 'forbidden', reason: 'owner_session_required', param: 'organization_id' });
    // A malformed id is a 400 naming the field.
    expect(await refusal(asPerson(owner).payments.billing({ organization_id: 'acct_nope' }))).toMatchObject({ code: 'invalid_request', param: 'organization_id' });

    expect(recorder.requests.filter((r) => r.method === 'POST')).toHaveLength(0);
    expect(await purchased(org.id)).toBe(0n);
  });
});
