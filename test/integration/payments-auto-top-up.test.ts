import { startTestWorker } from '../support/jobs.ts';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { temporalAutoTopUps, temporalGenerationStarter } from '../../config/temporal.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { startAutoTopUpIfLow } from '../../core/payments/auto-top-up.ts';
import { reconcilePayments } from '../../core/payments/reconcile.ts';
import { createCaller } from '../../core/router.ts';
import { getBalance } from '../../core/money/wallet.ts';
import { autoTopUpWorkflowId } from '../../workflows/shared.ts';
import type { RunningWorker } from '../../workflows/worker.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { csrfOf, signUpPerson, type Person } from '../support/cookie-browser.ts';
import { makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';
import { startTimeSkipping } from '../support/temporal-test-server.ts';

/**
 * Auto top-up end to end: the pages turn it on through a Checkout that saves the card; a chat's
 * settle under the threshold starts the real auto top-up workflow on Temporal's time-skipping
 * test server and a real worker, which charges the card off-session at Stripe (stripe-mock, behind a proxy
 * that records each request and plays the answers stripe-mock cannot: a succeeded payment, a
 * decline, a bank asking for the customer, a Stripe outage); the signed webhook credits it
 * once. One charge per account at a time, at most AUTO_TOPUP_MAX_PER_DAY (2 here) a day.
 */
const SECRET = 'whsec_test_auto_top_up';
const MICRO = 1_000_000n;
const taskQueue = `test-auto-top-up-${randomBytes(4).toString('hex')}`;

type Mode = { kind: 'succeed' } | { kind: 'decline' } | { kind: 'authentication_required' } | { kind: 'fail_then_succeed'; failures: number };
interface Sent {
  method: string;
  path: string;
  body: URLSearchParams;
  idempotencyKey: string | undefined;
}

let orm: MikroORM;
let mock: RunningStripeMock;
let proxy: http.Server;
let proxyUrl: string;
let mode: Mode = { kind: 'succeed' };
const sent: Sent[] = [];
/** The intent each idempotency key made, as Stripe keeps it: a retry gets the first answer. */
const intentsByKey = new Map<string, string>();
/** The succeeded intents the list endpoint answers (the reconciliation). */
let listedIntents: object[] = [];
let deps: CoreDeps;
let api: Awaited<ReturnType<typeof serve>>;
let env: TestWorkflowEnvironment;
let client: Client;
let worker: RunningWorker;

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;
const json = (res: http.ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), 'request-id': unique('req') });
  res.end(text);
};
const cardError = (code: string, message: string, extra: object = {}) => ({
  error: { type: 'card_error', code, message, ...extra, payment_intent: { id: unique('pi'), object: 'payment_intent', status: 'requires_payment_method' } },
});

beforeAll(async () => {
  orm = await openTestOrm(20);
  mock = await startTestStripeMock();
  const target = new URL(mock.url);
  proxy = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const path = (req.url ?? '').split('?')[0]!;
      const idempotencyKey = req.headers['idempotency-key'] as string | undefined;
      sent.push({ method: req.method!, path, body: new URLSearchParams(raw.toString()), idempotencyKey });
      if (req.method === 'POST' && path === '/v1/payment_intents') {
        if (mode.kind === 'decline') return json(res, 402, cardError('card_declined', 'Your card has insufficient funds.', { decline_code: 'insufficient_funds' }));
        if (mode.kind === 'authentication_required') return json(res, 402, cardError('authentication_required', 'Your card was declined. This transaction requires authentication.'));
        if (mode.kind === 'fail_then_succeed' && mode.failures > 0) {
          mode.failures--;
          return json(res, 500, { error: { type: 'api_error', message: 'An unknown error occurred.' } });
        }
      }
      const upstream = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (up) => {
        const body: Buffer[] = [];
        up.on('data', (c: Buffer) => body.push(c));
        up.on('end', () => {
          let answer = JSON.parse(Buffer.concat(body).toString('utf8') || '{}') as Record<string, unknown>;
          if (up.statusCode === 200 && req.method === 'POST' && path === '/v1/payment_intents') {
            // stripe-mock answers a fixture; Stripe would answer a succeeded payment, the same for a retried key.
            const id = intentsByKey.get(idempotencyKey ?? '') ?? unique('pi');
            if (idempotencyKey) intentsByKey.set(idempotencyKey, id);
            answer = { ...answer, id, status: 'succeeded', amount_received: Number(new URLSearchParams(raw.toString()).get('amount')) };
          } else if (up.statusCode === 200 && req.method === 'GET' && /^\/v1\/payment_intents\/[^/]+$/.test(path)) {
            answer = { ...answer, payment_method: 'pm_test_saved_card' };
          } else if (up.statusCode === 200 && req.method === 'GET' && ['/v1/payment_intents', '/v1/checkout/sessions', '/v1/invoices'].includes(path)) {
            answer = { ...answer, data: path === '/v1/payment_intents' ? listedIntents : [], has_more: false };
          }
          json(res, up.statusCode ?? 502, answer);
        });
      });
      upstream.end(raw);
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;

  // Temporal's time-skipping test server: the workflow's retry backoff after a Stripe outage (5 s,
  // doubling) passes as the test waits on the run's result, not in real time.
  env = await startTimeSkipping();
  client = env.client;
  const providers = await useTestCatalog(orm, 'http://127.0.0.1:9/v1');
  deps = testDeps(orm, {
    providers,
    autoTopUps: temporalAutoTopUps(client, { taskQueue }),
    generations: temporalGenerationStarter(client, { taskQueue }),
    publicBaseUrl: 'https://mas.example',
    env: { STRIPE_SECRET_KEY: 'sk_test_AutoTopUp', STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_API_URL: proxyUrl, SIGNUP: 'open', AUTO_TOPUP_MAX_PER_DAY: '2' },
  });
  api = await serve(createTestApp({ deps, publicBaseUrl: 'https://mas.example' }));
  worker = await startTestWorker({ deps, taskQueue, connection: env.nativeConnection });
});
afterAll(async () => {
  await worker?.shutdown();
  await env?.teardown();
  await api?.close();
  await new Promise((resolve) => proxy?.close(resolve));
  await mock?.stop();
  await orm?.close();
});

function eventOf(type: string, object: object, id = unique('evt')): string {
  return JSON.stringify({ id, object: 'event', api_version: Stripe.API_VERSION, type, created: Math.floor(Date.now() / 1000), livemode: false, data: { object } });
}
async function deliver(payload: string): Promise<string> {
  const signature = Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET, timestamp: Math.floor(Date.now() / 1000) });
  const res = await getJson(`${api.base}/webhooks/stripe`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': signature }, body: payload });
  expect(res.status).toBe(200);
  return res.body.outcome as string;
}

const as = (person: Person) => createCaller(createContext(deps, { kind: 'session', token: person.session }));
const intentPosts = () => sent.filter((r) => r.method === 'POST' && r.path === '/v1/payment_intents');
const charges = (accountId: string) =>
  orm.em.fork().execute<{ id: string; status: string; payment_intent_id: string | null; reason: string | null; amount_cents: string }[]>(
    'select id, status, payment_intent_id, reason, amount_cents::text from auto_top_up_charges where account_id = ? order by created_at',
    [accountId],
  );
const balance = async (accountId: string) => getBalance(orm.em.fork(), accountId);
const runIdOf = (accountId: string) =>
  client.workflow
    .getHandle(autoTopUpWorkflowId(accountId))
    .describe()
    .then((d) => d.runId, (err: unknown) => (err instanceof WorkflowNotFoundError ? null : Promise.reject(err)));
/**
 * Does `action` (a chat, whose settle starts the auto top-up after its answer), waits for the
 * account's next auto top-up workflow run to start and close, and answers what it returned.
 */
async function nextOutcome(accountId: string, action: () => Promise<unknown>): Promise<string> {
  const before = await runIdOf(accountId);
  await action();
  let runId: string | null = null;
  await vi.waitFor(
    async () => {
      runId = await runIdOf(accountId);
      if (runId === null || runId === before) throw new Error('no new auto top-up run yet');
    },
    { timeout: 20_000, interval: 100 },
  );
  return (await client.workflow.getHandle(autoTopUpWorkflowId(accountId), runId!).result()) as string;
}

/** Signs a person up on the pages and turns auto top-up on there: the form goes to Stripe's Checkout, whose signed completion saves the card. */
async function withCardSaved(tag: string, thresholdCoins = '1000000', amountUsd = '25') {
  const person = await signUpPerson(api.base, orm, tag);
  const overview = await (await person.browser.fetch('/account/billing')).text();
  expect(overview).toContain('Auto top-up');
  sent.length = 0;
  const res = await person.browser.post('/account/auto-top-up', { _csrf: csrfOf(overview)!, enabled: 'on', threshold_coins: thresholdCoins, amount_usd: amountUsd, idempotency_key: unique('k') });
  expect(res.status).toBe(303);
  expect(res.headers.get('location')).toMatch(/^https:\/\//);
  const checkout = sent.find((r) => r.path === '/v1/checkout/sessions')!;
  const cents = String(Math.round(Number(amountUsd) * 100));
  expect(Object.fromEntries(checkout.body)).toMatchObject({
    mode: 'payment',
    client_reference_id: person.accountId,
    'payment_intent_data[setup_future_usage]': 'off_session',
    'metadata[mas_saves_card]': 'auto_topup',
    'line_items[0][price_data][unit_amount]': cents,
  });
  expect(await as(person).payments.autoTopUp()).toMatchObject({ enabled: false, card_saved: false });

  const customer = unique('cus');
  const setupIntent = unique('pi');
  const session = {
    id: unique('cs'),
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: person.accountId,
    metadata: { mas_account_id: person.accountId, mas_purpose: 'topup', mas_saves_card: 'auto_topup' },
    payment_status: 'paid',
    amount_total: Number(cents),
    currency: 'usd',
    customer,
    payment_intent: setupIntent,
  };
  expect(await deliver(eventOf('checkout.session.completed', session))).toBe('credited');
  expect(await as(person).payments.autoTopUp()).toMatchObject({ enabled: true, card_saved: true, threshold_coins: Number(thresholdCoins), amount_usd: Number(amountUsd).toFixed(2) });
  return { person, customer, setupIntent };
}

/** Spends through a chat on the local echo model with a key of the account: its settle is what starts an auto top-up. */
async function chat(accountId: string) {
  const key = (await makeKey(orm, accountId)).key;
  const res = await getJson(`${api.base}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...bearer(key) },
    body: JSON.stringify({ model: 'test/local', messages: [{ role: 'user', content: 'hello' }], max_tokens: 16 }),
  });
  expect(res.status).toBe(200);
}

function intentSucceeded(accountId: string, customer: string, charge: { id: string; payment_intent_id: string | null; amount_cents: string }) {
  return {
    id: charge.payment_intent_id!,
    object: 'payment_intent',
    status: 'succeeded',
    metadata: { mas_account_id: accountId, mas_purpose: 'auto_topup', mas_charge_id: charge.id },
    amount: Number(charge.amount_cents),
    amount_received: Number(charge.amount_cents),
    currency: 'usd',
    customer,
  };
}

describe('auto top-up', () => {
  it('refuses a threshold or an amount it cannot use, naming the field, and changes nothing', async () => {
    const person = await signUpPerson(api.base, orm, 'atu-refusals');
    sent.length = 0;
    const cases: [Record<string, unknown>, string][] = [
      [{ enabled: true, amount_usd: '25' }, 'threshold_coins'],
      [{ enabled: true, threshold_coins: 0, amount_usd: '25' }, 'threshold_coins'],
      [{ enabled: true, threshold_coins: '12.5', amount_usd: '25' }, 'threshold_coins'],
      [{ enabled: true, threshold_coins: 500 }, 'amount_usd'],
      [{ enabled: true, threshold_coins: 500, amount_usd: '1' }, 'amount_usd'],
      [{ enabled: true, threshold_coins: 500, amount_usd: '10000.01' }, 'amount_usd'],
    ];
    for (const [input, param] of cases) {
      const err = await as(person)
        .payments.configureAutoTopUp(input as never)
        .then(() => null, (e: unknown) => e as { code?: string; cause?: { param?: string } });
      expect(err, JSON.stringify(input)).not.toBeNull();
      expect(JSON.stringify(err?.cause ?? err)).toContain(param);
    }
    expect(sent).toHaveLength(0);
    expect(await as(person).payments.autoTopUp()).toMatchObject({ enabled: false, threshold_coins: null, card_saved: false });
  });

  it('turns on through a Checkout that saves the card; a chat under the threshold charges it off-session once, and its webhook credits it once', async () => {
    const { person, customer, setupIntent } = await withCardSaved('atu-charge');
    const before = await balance(person.accountId);
    expect(before.purchased).toBe(25_000n * MICRO);
    sent.length = 0;

    expect(await nextOutcome(person.accountId, () => chat(person.accountId))).toBe('charged');
    // The card: the payment method of the Checkout's intent, read once and kept.
    expect(sent.filter((r) => r.method === 'GET' && r.path === `/v1/payment_intents/${setupIntent}`)).toHaveLength(1);
    const [charge] = await charges(person.accountId);
    expect(charge).toMatchObject({ status: 'charged', amount_cents: '2500', payment_intent_id: expect.stringMatching(/^pi_/) });
    expect(intentPosts()).toHaveLength(1);
    expect(Object.fromEntries(intentPosts()[0]!.body)).toEqual({
      amount: '2500',
      currency: 'usd',
      customer,
      payment_method: 'pm_test_saved_card',
      off_session: 'true',
      confirm: 'true',
      'metadata[mas_account_id]': person.accountId,
      'metadata[mas_purpose]': 'auto_topup',
      'metadata[mas_charge_id]': charge!.id,
    });
    expect(intentPosts()[0]!.idempotencyKey).toBe(`autotopup:${charge!.id}`);
    // Nothing is credited before the payment's webhook.
    const spent = await balance(person.accountId);
    expect(spent.purchased).toBeLessThan(before.purchased);

    // While that charge waits for its credit, more low settles charge nothing more: 20 at once.
    const outcome = await nextOutcome(person.accountId, () => Promise.all(Array.from({ length: 20 }, () => startAutoTopUpIfLow(deps, person.accountId))));
    expect(outcome).toBe('in_flight');
    expect(intentPosts()).toHaveLength(1);

    // Delivered twice, and once more under another event id: one credit.
    const payload = eventOf('payment_intent.succeeded', intentSucceeded(person.accountId, customer, charge!));
    expect(await deliver(payload)).toBe('credited');
    expect(await deliver(payload)).toBe('duplicate_event');
    expect(await deliver(eventOf('payment_intent.succeeded', intentSucceeded(person.accountId, customer, charge!)))).toBe('already_credited');
    expect((await balance(person.accountId)).purchased).toBe(spent.purchased + 25_000n * MICRO);
    expect(await charges(person.accountId)).toMatchObject([{ status: 'credited' }]);
    const [payment] = await orm.em.fork().execute<{ source: string; checkout_session_id: string | null; coins_micro: string }[]>(
      "select source, checkout_session_id, coins_micro::text from payments where payment_intent_id = ?",
      [charge!.payment_intent_id],
    );
    expect(payment).toEqual({ source: 'auto_top_up', checkout_session_id: null, coins_micro: String(25_000n * MICRO) });
    const history = await as(person).account.history({ limit: 5 });
    expect(history.data[0]).toMatchObject({ type: 'topup', description: 'Auto top-up', reference: charge!.payment_intent_id });

    // The second charge of the day; then the limit (2 here) holds however low the balance.
    expect(await nextOutcome(person.accountId, () => chat(person.accountId))).toBe('charged');
    const second = (await charges(person.accountId))[1]!;
    expect(await deliver(eventOf('payment_intent.succeeded', intentSucceeded(person.accountId, customer, second)))).toBe('credited');
    expect(await nextOutcome(person.accountId, () => chat(person.accountId))).toBe('daily_limit');
    expect(intentPosts()).toHaveLength(2);
    expect(await as(person).payments.autoTopUp()).toMatchObject({ enabled: true, charges_last_24h: 2, max_per_day: 2 });
  });

  it("a media job's settle starts it too", async () => {
    const { person } = await withCardSaved('atu-media');
    const key = (await makeKey(orm, person.accountId)).key;
    sent.length = 0;
    let jobId = '';
    const outcome = await nextOutcome(person.accountId, async () => {
      const job = await getJson(`${api.base}/api/v1/generations`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test/image', prompt: 'a lighthouse' }),
      });
      expect(job.status).toBe(202);
      jobId = job.body.id as string;
    });
    expect(outcome).toBe('charged');
    const [job] = await orm.em.fork().execute<{ status: string }[]>('select status from generations where id = ?', [jobId]);
    expect(job?.status).toBe('succeeded');
    expect(intentPosts()).toHaveLength(1);
  });

  it('does not charge while the purchased coins are at or above the threshold, nor once turned off', async () => {
    const { person } = await withCardSaved('atu-above', '100', '5');
    sent.length = 0;
    await chat(person.accountId);
    // 5,000 purchased coins, a chat of a fraction of a coin: far above 100.
    expect(await startAutoTopUpIfLow(deps, person.accountId)).toBe(false);
    await as(person).payments.configureAutoTopUp({ enabled: true, threshold_coins: 1_000_000, amount_usd: '5' });
    await as(person).payments.configureAutoTopUp({ enabled: false });
    await chat(person.accountId);
    expect(await startAutoTopUpIfLow(deps, person.accountId)).toBe(false);
    expect(intentPosts()).toHaveLength(0);
    expect(await charges(person.accountId)).toEqual([]);
  });

  it('a decline turns auto top-up off with the reason, which the pages show; turning it on again needs no new card', async () => {
    const { person } = await withCardSaved('atu-decline');
    mode = { kind: 'decline' };
    try {
      expect(await nextOutcome(person.accountId, () => chat(person.accountId))).toBe('declined');
    } finally {
      mode = { kind: 'succeed' };
    }
    expect(await charges(person.accountId)).toMatchObject([{ status: 'declined', reason: 'The card was declined (insufficient_funds).' }]);
    const view = await as(person).payments.autoTopUp();
    expect(view).toMatchObject({ enabled: false, card_saved: true, disabled_reason: 'The card was declined (insufficient_funds).' });
    const page = await (await person.browser.fetch('/account/billing')).text();
    expect(page).toContain('Auto top-up was turned off on');
    expect(page).toContain('The card was declined (insufficient_funds).');
    // No more charges while off.
    sent.length = 0;
    await chat(person.accountId);
    expect(await startAutoTopUpIfLow(deps, person.accountId)).toBe(false);
    expect(intentPosts()).toHaveLength(0);

    // On again from the page: the card is saved, so no Checkout.
    const res = await person.browser.post('/account/auto-top-up', { _csrf: csrfOf(page)!, enabled: 'on', threshold_coins: '1000000', amount_usd: '25' });
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('/account/billing?auto_top_up=on#auto-top-up');
    expect(sent.filter((r) => r.path === '/v1/checkout/sessions')).toHaveLength(0);
    expect(await as(person).payments.autoTopUp()).toMatchObject({ enabled: true, disabled_reason: null });
  });

  it('a bank that wants the customer present turns it off too, saying what to do', async () => {
    const { person } = await withCardSaved('atu-sca');
    mode = { kind: 'authentication_required' };
    try {
      expect(await nextOutcome(person.accountId, () => chat(person.accountId))).toBe('requires_action');
    } finally {
      mode = { kind: 'succeed' };
    }
    const view = await as(person).payments.autoTopUp();
    expect(view.enabled).toBe(false);
    expect(view.disabled_reason).toMatch(/^The bank asks the customer to confirm this payment\. Add credits yourself/);
  });

  it('a Stripe outage is retried by the workflow under the same idempotency key: one charge', async () => {
    const { person } = await withCardSaved('atu-retry');
    // The SDK tries three times (two retries); the activity's first attempt fails, its retry succeeds.
    mode = { kind: 'fail_then_succeed', failures: 3 };
    sent.length = 0;
    try {
      expect(await nextOutcome(person.accountId, () => chat(person.accountId))).toBe('charged');
    } finally {
      mode = { kind: 'succeed' };
    }
    const posts = intentPosts();
    expect(posts.length).toBeGreaterThanOrEqual(4);
    expect(new Set(posts.map((p) => p.idempotencyKey)).size).toBe(1);
    expect(await charges(person.accountId)).toMatchObject([{ status: 'charged' }]);
  });

  it('a failed payment after a first "processing" turns it off; the reconciliation credits a succeeded charge whose webhook never came, once', async () => {
    const { person, customer } = await withCardSaved('atu-reconcile');
    expect(await nextOutcome(person.accountId, () => chat(person.accountId))).toBe('charged');
    const [charge] = await charges(person.accountId);
    const purchased = (await balance(person.accountId)).purchased;

    listedIntents = [intentSucceeded(person.accountId, customer, charge!), { ...intentSucceeded(person.accountId, customer, charge!), id: unique('pi'), metadata: { mas_purpose: 'topup' } }];
    try {
      const report = await reconcilePayments(deps, orm.em.fork());
      expect(report.credited).toEqual([charge!.payment_intent_id]);
      expect(report.intents_listed).toBe(1);
      expect((await reconcilePayments(deps, orm.em.fork())).credited).toEqual([]);
    } finally {
      listedIntents = [];
    }
    expect((await balance(person.accountId)).purchased).toBe(purchased + 25_000n * MICRO);
    // The webhook, late: nothing more.
    expect(await deliver(eventOf('payment_intent.succeeded', intentSucceeded(person.accountId, customer, charge!)))).toBe('already_credited');

    // A later payment that fails after all (its first answer was "processing").
    const failed = { ...intentSucceeded(person.accountId, customer, { ...charge!, id: unique('atc'), payment_intent_id: unique('pi') }), status: 'requires_payment_method', last_payment_error: { code: 'card_declined', message: 'Your card was declined.' } };
    expect(await deliver(eventOf('payment_intent.payment_failed', failed))).toBe('auto_top_up_failed');
    expect(await as(person).payments.autoTopUp()).toMatchObject({ enabled: false, disabled_reason: 'The card was not charged: Your card was declined.' });
  });
});
