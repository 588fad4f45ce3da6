import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { startRecordingProxy, startTestStripeMock } from '../support/stripe-mock.ts';

/**
 * POST /api/v1/credits/checkout against stripe-mock (through a proxy that records what the
 * service sent Stripe), and the service with payments off.
 */
let orm: MikroORM;
let mock: RunningStripeMock;
let recorder: Awaited<ReturnType<typeof startRecordingProxy>>;
let on: Awaited<ReturnType<typeof serve>>;
let off: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  orm = await openTestOrm();
  mock = await startTestStripeMock();
  recorder = await startRecordingProxy(mock.url);
  const stripe = { STRIPE_SECRET_KEY: 'sk_test_PaymentsCheckout', STRIPE_WEBHOOK_SECRET: 'whsec_test_checkout', STRIPE_API_URL: recorder.url };
  on = await serve(createTestApp({ deps: testDeps(orm, { env: stripe, publicBaseUrl: 'https://mas.example' }) }));
  off = await serve(createTestApp({ deps: testDeps(orm) }));
});
afterAll(async () => {
  await on?.close();
  await off?.close();
  await recorder?.close();
  await mock?.stop();
  await orm?.close();
});

const checkout = (base: string, key: string | undefined, body: unknown, headers: Record<string, string> = {}) =>
  getJson(`${base}/api/v1/credits/checkout`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? bearer(key) : {}), ...headers },
    body: JSON.stringify(body),
  });

async function paymentRows(accountId: string) {
  const [row] = await orm.em.fork().execute<{ ledger: number; payments: number }[]>(
    `select (select count(*) from ledger_entries where account_id = ?)::int as ledger, (select count(*) from payments where account_id = ?)::int as payments`,
    [accountId, accountId],
  );
  return row!;
}

describe('POST /api/v1/credits/checkout', () => {
  it('answers a Checkout Session for the amount, made for the account, in USD, coming back to the pages; it credits nothing', async () => {
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    recorder.requests.length = 0;

    const res = await checkout(on.base, key, { amount_usd: 12.34 }, { 'idempotency-key': 'order-42' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ object: 'checkout_session', id: expect.stringMatching(/^cs_/), url: expect.stringMatching(/^https:\/\//) });

    expect(recorder.requests).toHaveLength(1);
    const sent = recorder.requests[0]!;
    expect(sent).toMatchObject({ method: 'POST', path: '/v1/checkout/sessions' });
    expect(Object.fromEntries(sent.body)).toMatchObject({
      mode: 'payment',
      client_reference_id: account.id,
      'metadata[mas_account_id]': account.id,
      'metadata[mas_purpose]': 'topup',
      'payment_intent_data[metadata][mas_account_id]': account.id,
      'line_items[0][quantity]': '1',
      'line_items[0][price_data][currency]': 'usd',
      'line_items[0][price_data][unit_amount]': '1234',
      'line_items[0][price_data][product_data][name]': '12,340 coins',
      customer_creation: 'always',
      success_url: 'https://mas.example/account/credits/success?session_id={CHECKOUT_SESSION_ID}',
      cancel_url: 'https://mas.example/account/billing?checkout=canceled',
    });
    // The client's key, scoped to the account and hashed; without one, a fresh key per request.
    expect(sent.idempotencyKey).toMatch(new RegExp(`^topup:${account.id}:[\\w-]{43}$`));
    await checkout(on.base, key, { amount_usd: '12.34' }, { 'idempotency-key': 'order-42' });
    expect(recorder.requests[1]!.idempotencyKey).toBe(sent.idempotencyKey);
    await checkout(on.base, key, { amount_usd: '5' });
    expect(recorder.requests[2]!.idempotencyKey).not.toBe(sent.idempotencyKey);
    expect(recorder.requests[2]!.body.get('line_items[0][price_data][unit_amount]')).toBe('500');

    expect(await paymentRows(account.id)).toEqual({ ledger: 0, payments: 0 });
  });

  it('refuses an amount outside 5 to 10,000 USD, or not an amount, with 400 naming amount_usd, asking Stripe nothing', async () => {
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    recorder.requests.length = 0;
    const cases: [unknown, string, RegExp][] = [
      [{ amount_usd: 4.99 }, 'amount_too_small', /^The amount must be at least 5\.00 USD\.$/],
      [{ amount_usd: '10000.01' }, 'amount_too_large', /^The amount must be at most 10000\.00 USD\.$/],
      [{ amount_usd: 0 }, 'invalid_value', /^Invalid value for 'amount_usd': must be an amount in US dollars/],
      [{ amount_usd: -20 }, 'invalid_value', /'amount_usd'/],
      [{ amount_usd: 12.345 }, 'invalid_value', /with at most 2 decimals/],
      [{ amount_usd: '1e3' }, 'invalid_value', /'amount_usd'/],
      [{ amount_usd: null }, 'invalid_value', /'amount_usd'/],
      [{ amount: 20 }, 'missing_field', /^Missing required parameter: 'amount_usd'\.$/],
      [[20], 'invalid_body', /JSON object/],
    ];
    for (const [body, code, message] of cases) {
      const res = await checkout(on.base, key, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body, JSON.stringify(body)).toEqual({ error: { type: 'invalid_request_error', param: code === 'invalid_body' ? 'body' : 'amount_usd', code, message: expect.stringMatching(message) } });
    }
    expect(recorder.requests).toHaveLength(0);
    expect(await paymentRows(account.id)).toEqual({ ledger: 0, payments: 0 });
  });

  it('needs a valid key, and a JSON body', async () => {
    expect((await checkout(on.base, undefined, { amount_usd: 20 })).status).toBe(401);
    expect((await checkout(on.base, 'mas_not_a_key', { amount_usd: 20 })).status).toBe(401);
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    const form = await getJson(`${on.base}/api/v1/credits/checkout`, { method: 'POST', headers: { ...bearer(key), 'content-type': 'text/plain' }, body: 'amount_usd=20' });
    expect(form.status).toBe(415);
  });
});

describe('payments off (no STRIPE_SECRET_KEY)', () => {
  it('refuses the checkout with 403 payments_not_configured (the operator chose not to sell by card: not a server error), answers the webhook 503 for Stripe to retry, writes nothing; the rest of the API works as before', async () => {
    const account = await makeAccount(orm, { coins: '3' });
    const key = (await makeKey(orm, account.id)).key;
    const res = await checkout(off.base, key, { amount_usd: 20 });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ error: { type: 'permission_error', param: null, code: 'payments_not_configured', message: 'Payments are not set up on this server: coins can only be added by its operator.' } });
    const hook = await getJson(`${off.base}/webhooks/stripe`, { method: 'POST', headers: { 'content-type': 'application/json', 'stripe-signature': 't=1,v1=x' }, body: '{}' });
    expect(hook.status).toBe(503);
    expect(hook.body.error.code).toBe('payments_not_configured');
    expect(await paymentRows(account.id)).toEqual({ ledger: 1, payments: 0 }); // the fixture's top-up only
    expect((await getJson(`${off.base}/api/v1/balance`, { headers: bearer(key) })).body).toMatchObject({ coins: 3, paid_account: true });
  });
});
