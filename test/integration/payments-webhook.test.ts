import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { getBalance } from '../../core/money/wallet.ts';
import { makeAccount, makeKey, openTestOrm, testDeps, walletInvariants } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';

/**
 * Stripe's webhook (POST /webhooks/stripe) through the real HTTP app, real PostgreSQL, and the
 * Stripe adapter pointed at stripe-mock. Events are fixtures signed with the SDK's own
 * generateTestHeaderString and the configured secret, as Stripe signs them.
 */
const SECRET = 'whsec_test_payments_webhook';
let orm: MikroORM;
let mock: RunningStripeMock;
let api: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  orm = await openTestOrm(20);
  mock = await startTestStripeMock();
  const deps = testDeps(orm, { env: { STRIPE_SECRET_KEY: 'sk_test_PaymentsWebhook', STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_API_URL: mock.url } });
  api = await serve(createTestApp({ deps }));
});
afterAll(async () => {
  await api?.close();
  await mock?.stop();
  await orm?.close();
});

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;

/** A Checkout Session as the service makes it for a top-up (adapters/payments/stripe.ts), as Stripe reports it once paid. */
function topUpSession(accountId: string, over: Record<string, unknown> = {}) {
  return {
    id: unique('cs'),
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: accountId,
    metadata: { mas_account_id: accountId, mas_purpose: 'topup' },
    payment_status: 'paid',
    status: 'complete',
    amount_total: 1234,
    currency: 'usd',
    customer: 'cus_test_1',
    payment_intent: unique('pi'),
    ...over,
  };
}

function eventOf(type: string, object: object, id = unique('evt')): string {
  return JSON.stringify({ id, object: 'event', api_version: Stripe.API_VERSION, type, created: Math.floor(Date.now() / 1000), livemode: false, data: { object } });
}

const sign = (payload: string, opts: { secret?: string; at?: Date } = {}) =>
  Stripe.webhooks.generateTestHeaderString({ payload, secret: opts.secret ?? SECRET, timestamp: Math.floor((opts.at ?? new Date()).getTime() / 1000) });

/** `null`: no Stripe-Signature header at all. */
function deliver(payload: string, signature: string | null = sign(payload)) {
  return getJson(`${api.base}/webhooks/stripe`, {
    method: 'POST',
    headers: { 'content-type': 'application/json; charset=utf-8', ...(signature === null ? {} : { 'stripe-signature': signature }) },
    body: payload,
  });
}

/** What the webhook wrote for an account, a session and an event: the "nothing written" checks. */
async function written(accountId: string, sessionId: string, eventId?: string) {
  const [row] = await orm.em.fork().execute<{ ledger: number; payments: number; events: number; audits: number }[]>(
    `select (select count(*) from ledger_entries where account_id = ?)::int as ledger,
            (select count(*) from payments where checkout_session_id = ?)::int as payments,
            (select count(*) from payment_events where event_id = ?)::int as events,
            (select count(*) from admin_audit_log where target_type = 'payment' and target_id = ?)::int as audits`,
    [accountId, sessionId, eventId ?? '', sessionId],
  );
  return row!;
}

const eventIdOf = (payload: string) => (JSON.parse(payload) as { id: string }).id;

describe('POST /webhooks/stripe: a paid top-up', () => {
  it('credits a session delivered 50 times at once, and again under a second event id, exactly once: amount_total cents × 10 coins', async () => {
    const account = await makeAccount(orm);
    const key = (await makeKey(orm, account.id)).key;
    expect((await getBalance(orm.em.fork(), account.id)).paid).toBe(false);
    const session = topUpSession(account.id, { amount_total: 1234 });
    const completed = eventOf('checkout.session.completed', session);
    // The same session, as Stripe may send it again under another event (a resend, async_payment_succeeded).
    const again = eventOf('checkout.session.async_payment_succeeded', session);

    const answers = await Promise.all([...Array.from({ length: 50 }, () => deliver(completed)), deliver(again)]);
    expect(answers.map((a) => a.status)).toEqual(Array(51).fill(200));
    const outcomes = answers.map((a) => a.body.outcome).sort();
    expect(outcomes).toEqual(['already_credited', 'credited', ...Array(49).fill('duplicate_event')].sort());
    expect(answers[0]!.body).toMatchObject({ object: 'payment_webhook', event: eventIdOf(completed), type: 'checkout.session.completed' });

    // 1234 cents = 12.34 USD = 12,340 coins = 12,340,000,000 micro-coins, in the purchased pocket.
    const balance = await getBalance(orm.em.fork(), account.id);
    expect(balance).toEqual({ subscription: 0n, purchased: 12_340_000_000n, held: 0n, paid: true });
    const entries = await orm.em.fork().execute<{ id: string; kind: string; pocket: string; amount_micro: string; reference: string; description: string }[]>(
      'select id::text, kind, pocket, amount_micro::text, reference, description from ledger_entries where account_id = ?',
      [account.id],
    );
    expect(entries).toEqual([{ id: expect.any(String), kind: 'topup', pocket: 'purchased', amount_micro: '12340000000', reference: session.id, description: 'Top-up' }]);
    const payments = await orm.em.fork().execute<Record<string, unknown>[]>(
      'select account_id, amount_cents::int, currency, coins_micro::text, payment_intent_id, customer_id, event_id, ledger_entry_id::text from payments where checkout_session_id = ?',
      [session.id],
    );
    expect(payments).toEqual([
      {
        account_id: account.id,
        amount_cents: 1234,
        currency: 'usd',
        coins_micro: '12340000000',
        payment_intent_id: session.payment_intent,
        customer_id: 'cus_test_1',
        event_id: expect.stringMatching(/^evt_/),
        ledger_entry_id: entries[0]!.id,
      },
    ]);
    const events = await orm.em.fork().execute<{ event_id: string; outcome: string; account_id: string }[]>(
      'select event_id, outcome, account_id from payment_events where object_id = ? order by outcome',
      [session.id],
    );
    expect(events).toHaveLength(2);
    expect(events.map((e) => e.outcome)).toEqual(['already_credited', 'credited']);
    expect(events.find((e) => e.outcome === 'credited')!.event_id).toBe(payments[0]!.event_id);
    const state = await walletInvariants(orm, account.id);
    expect(state.ledgerTotal).toBe(12_340_000_000n);
    // Behind the ledger's idempotency key, the table itself refuses a second payment of the session.
    const other = await makeAccount(orm, { coins: '1' });
    await expect(
      orm.em.fork().execute(
        `insert into payments (id, checkout_session_id, account_id, amount_cents, currency, coins_micro, event_id, ledger_entry_id)
         select 'pay_second', checkout_session_id, account_id, amount_cents, currency, coins_micro, 'evt_other', (select min(id) from ledger_entries where account_id = ?)
         from payments p where checkout_session_id = ?`,
        [other.id, session.id],
      ),
    ).rejects.toThrow(/payments_checkout_session_key/);

    // The customer sees it as one top-up, in the API's history and balance.
    const history = await getJson(`${api.base}/api/v1/wallet/history`, { headers: bearer(key) });
    expect(history.body.data).toEqual([expect.objectContaining({ type: 'topup', description: 'Top-up', amount_coins: 12340, balance_after_coins: 12340, reference: session.id })]);
    const shown = await getJson(`${api.base}/api/v1/balance`, { headers: bearer(key) });
    expect(shown.body).toMatchObject({ coins: 12340, purchased_coins: 12340, paid_account: true });

    // A replay days later, fresh signature and all: nothing more.
    expect((await deliver(completed)).body.outcome).toBe('duplicate_event');
    expect((await getBalance(orm.em.fork(), account.id)).purchased).toBe(12_340_000_000n);
  });

  it('waits for a delayed payment: a completed but unpaid session credits nothing, its later success credits, its failure never', async () => {
    const account = await makeAccount(orm);
    const session = topUpSession(account.id, { payment_status: 'unpaid', amount_total: 500 });
    const unpaid = eventOf('checkout.session.completed', session);
    expect(await deliver(unpaid)).toMatchObject({ status: 200, body: { outcome: 'awaiting_payment' } });
    expect(await written(account.id, session.id, eventIdOf(unpaid))).toEqual({ ledger: 0, payments: 0, events: 1, audits: 0 });

    expect(await deliver(eventOf('checkout.session.async_payment_succeeded', { ...session, payment_status: 'paid' }))).toMatchObject({ status: 200, body: { outcome: 'credited' } });
    // 500 cents = 5,000 coins.
    expect((await getBalance(orm.em.fork(), account.id)).purchased).toBe(5_000_000_000n);

    const other = topUpSession(account.id, { payment_status: 'unpaid' });
    expect(await deliver(eventOf('checkout.session.async_payment_failed', other))).toMatchObject({ status: 200, body: { outcome: 'payment_failed' } });
    expect(await written(account.id, other.id)).toMatchObject({ ledger: 1, payments: 0 });
  });

  it('credits nothing for a session in another currency, or with no amount, and leaves it to an operator in the audit log', async () => {
    const account = await makeAccount(orm);
    for (const [over, outcome, reason] of [
      [{ currency: 'eur' }, 'refused_currency', 'paid in eur, not usd'],
      [{ amount_total: 0 }, 'refused_amount', 'the session has no amount to credit'],
    ] as const) {
      const session = topUpSession(account.id, over);
      const payload = eventOf('checkout.session.completed', session);
      expect(await deliver(payload)).toMatchObject({ status: 200, body: { outcome } });
      expect(await written(account.id, session.id, eventIdOf(payload))).toEqual({ ledger: 0, payments: 0, events: 1, audits: 1 });
      const [audit] = await orm.em.fork().execute<{ actor_type: string; action: string; reason: string; after: Record<string, unknown> }[]>(
        `select actor_type, action, reason, after from admin_audit_log where target_type = 'payment' and target_id = ?`,
        [session.id],
      );
      expect(audit).toMatchObject({ actor_type: 'internal', action: 'payment.not_credited', reason, after: { event_id: eventIdOf(payload), account_id: account.id } });
    }
    expect(await getBalance(orm.em.fork(), account.id)).toMatchObject({ purchased: 0n, paid: false });
  });

  it('refuses a paid amount above Stripe’s maximum (99,999,999 cents) or the top-up maximum with 200 refused_amount, audited, never a 500; the maximum itself credits', async () => {
    const account = await makeAccount(orm);
    // TOPUP_MAX_USD is 10,000 USD (1,000,000 cents) here.
    for (const cents of [1_000_000_000_000, 900_000_000_000, 100_000_000, 99_999_999, 1_000_001]) {
      const session = topUpSession(account.id, { amount_total: cents });
      const payload = eventOf('checkout.session.completed', session);
      expect(await deliver(payload), `${cents} cents`).toMatchObject({ status: 200, body: { outcome: 'refused_amount' } });
      expect(await written(account.id, session.id, eventIdOf(payload))).toEqual({ ledger: 0, payments: 0, events: 1, audits: 1 });
      const [audit] = await orm.em.fork().execute<{ action: string; reason: string; after: Record<string, unknown> }[]>(
        `select action, reason, after from admin_audit_log where target_type = 'payment' and target_id = ?`,
        [session.id],
      );
      expect(audit).toMatchObject({ action: 'payment.not_credited', reason: expect.stringMatching(/more than the largest top-up/), after: { amount_cents: cents } });
    }
    expect(await getBalance(orm.em.fork(), account.id)).toMatchObject({ purchased: 0n, paid: false });
    const max = topUpSession(account.id, { amount_total: 1_000_000 });
    expect(await deliver(eventOf('checkout.session.completed', max))).toMatchObject({ status: 200, body: { outcome: 'credited' } });
    expect(await getBalance(orm.em.fork(), account.id)).toMatchObject({ purchased: 1_000_000n * 10n * 1_000_000n, paid: true });
  });

  it('records a paid session for an unknown account, answers 200, and audits it', async () => {
    const session = topUpSession('acct_doesNotExist000000000000');
    const payload = eventOf('checkout.session.completed', session);
    expect(await deliver(payload)).toMatchObject({ status: 200, body: { outcome: 'unknown_account' } });
    const [event] = await orm.em.fork().execute<{ outcome: string; account_id: string }[]>('select outcome, account_id from payment_events where event_id = ?', [eventIdOf(payload)]);
    expect(event).toEqual({ outcome: 'unknown_account', account_id: 'acct_doesNotExist000000000000' });
    expect(await written('acct_doesNotExist000000000000', session.id, eventIdOf(payload))).toEqual({ ledger: 0, payments: 0, events: 1, audits: 1 });
  });

  it('answers 200 to event types it does not use, and to sessions that are not top-ups, crediting nothing', async () => {
    const account = await makeAccount(orm);
    expect(await deliver(eventOf('customer.created', { id: 'cus_1', object: 'customer' }))).toMatchObject({ status: 200, body: { outcome: 'ignored', type: 'customer.created' } });
    const subscription = topUpSession(account.id, { mode: 'subscription', metadata: { mas_account_id: account.id, mas_purpose: 'subscription' } });
    expect(await deliver(eventOf('checkout.session.completed', subscription))).toMatchObject({ status: 200, body: { outcome: 'subscription_checkout' } });
    const foreign = topUpSession(account.id, { metadata: {} }); // a Payment Link of the operator's, say
    expect(await deliver(eventOf('checkout.session.completed', foreign))).toMatchObject({ status: 200, body: { outcome: 'not_a_topup' } });
    expect(await written(account.id, foreign.id)).toMatchObject({ ledger: 0, payments: 0 });
  });
});

describe('POST /webhooks/stripe: bad deliveries get 400 and write nothing', () => {
  it('a wrong signature, a stale or missing one, a body changed after signing, a body that is not JSON', async () => {
    const account = await makeAccount(orm);
    const session = topUpSession(account.id);
    const payload = eventOf('checkout.session.completed', session);
    const sixMinutesAgo = new Date(Date.now() - 6 * 60_000);
    const cases: [string, string, string | null, string, RegExp][] = [
      ['wrong secret', payload, sign(payload, { secret: 'whsec_someone_else' }), 'invalid_webhook_signature', /does not match/],
      ['stale timestamp', payload, sign(payload, { at: sixMinutesAgo }), 'invalid_webhook_signature', /more than 300 seconds old/],
      ['no signature', payload, null, 'invalid_webhook_signature', /no signature/],
      ['malformed signature', payload, 'v1=abc', 'invalid_webhook_signature', /malformed/],
      ['body changed after signing', payload.replace('"amount_total":1234', '"amount_total":999999'), sign(payload), 'invalid_webhook_signature', /does not match/],
      ['not JSON', 'amount_total=1234', sign('amount_total=1234'), 'invalid_webhook_payload', /not a JSON event/],
      ['JSON, not an event', '{"amount_total":1234}', sign('{"amount_total":1234}'), 'invalid_webhook_payload', /not a Stripe event/],
      ['empty body', '', sign(''), 'invalid_webhook_payload', /not a JSON event/],
    ];
    for (const [what, body, signature, code, message] of cases) {
      const res = await deliver(body, signature);
      expect(res.status, what).toBe(400);
      expect(res.body, what).toEqual({ error: { type: 'invalid_request_error', param: expect.any(String), code, message: expect.stringMatching(message) } });
    }
    expect(await written(account.id, session.id, eventIdOf(payload))).toEqual({ ledger: 0, payments: 0, events: 0, audits: 0 });
    // The same event, properly signed, still credits: nothing above was recorded as seen.
    expect((await deliver(payload)).body.outcome).toBe('credited');
  });

  it('verifies the bytes as sent (a pretty-printed body, never re-serialised), and refuses a body over 1 MB with 413', async () => {
    const account = await makeAccount(orm);
    const pretty = JSON.stringify(JSON.parse(eventOf('checkout.session.completed', topUpSession(account.id, { amount_total: 700 }))), null, 2);
    expect(await deliver(pretty)).toMatchObject({ status: 200, body: { outcome: 'credited' } });
    expect((await getBalance(orm.em.fork(), account.id)).purchased).toBe(7_000_000_000n);
    const huge = JSON.stringify({ pad: 'x'.repeat(1_100_000) });
    const res = await deliver(huge);
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('request_too_large');
  });

  it('answers other methods with 405 and other paths under /webhooks with 404, in the error shape', async () => {
    const get = await getJson(`${api.base}/webhooks/stripe`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    expect(get.body.error.code).toBe('method_not_allowed');
    const other = await getJson(`${api.base}/webhooks/paypal`, { method: 'POST', body: '{}' });
    expect(other.status).toBe(404);
    expect(other.body.error.code).toBe('unknown_route');
  });
});
