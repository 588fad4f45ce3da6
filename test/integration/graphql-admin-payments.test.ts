import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handlePaymentEvent } from '../../core/payments/receive-webhook.ts';
import type { PaymentEvent } from '../../core/ports.ts';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, uniqueEmail } from '../support/db.ts';
import { startAdminApi } from '../support/graphql.ts';

/**
 * Payments and revenue per day in the GraphQL admin API (core admin.payments.*). Payments are
 * made by the code the webhook runs (handlePaymentEvent) with events as the Stripe adapter reads
 * them; the expectations are written out from cents (1 cent = 10 coins).
 */
let api: Awaited<ReturnType<typeof startAdminApi>>;
beforeAll(async () => {
  api = await startAdminApi();
});
afterAll(() => api.close());

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;
const base = () => ({ eventId: unique('evt'), createdAt: new Date() });

async function handle(event: PaymentEvent): Promise<string> {
  return (await handlePaymentEvent(api.deps, api.orm.em.fork(), event)).outcome;
}

async function topUp(accountId: string, cents: number) {
  const p = { session: unique('cs'), pi: unique('pi'), charge: unique('ch'), cents };
  expect(
    await handle({
      ...base(),
      providerType: 'checkout.session.completed',
      kind: 'checkout_session',
      stage: 'completed',
      session: { id: p.session, mode: 'payment', accountId, purpose: 'topup', paymentStatus: 'paid', amountTotalCents: cents, currency: 'usd', customerId: 'cus_test_admin', paymentIntentId: p.pi },
    }),
  ).toBe('credited');
  return p;
}

const PAYMENTS = `query ($accountId: String) { payments(accountId: $accountId) {
  accountId checkoutSessionId paymentIntentId customerId amountCents amountUsd currency coins status refundedCents
  reversals { kind stripeId amountCents coins } } }`;

describe('GraphQL admin: payments', () => {
  it('lists an account’s payments newest first, with Stripe ids, amount, status, refunds and disputes; a viewer may read them', async () => {
    const account = await makeAccount(api.orm);
    const refunded = await topUp(account.id, 2000);
    expect(await handle({ ...base(), providerType: 'charge.refunded', kind: 'refund', charge: { id: refunded.charge, paymentIntentId: refunded.pi, amountCents: 2000, amountRefundedCents: 500, currency: 'usd' } })).toBe('refunded');
    const disputed = await topUp(account.id, 1000);
    const dp = unique('dp');
    expect(
      await handle({ ...base(), providerType: 'charge.dispute.created', kind: 'dispute', stage: 'created', dispute: { id: dp, chargeId: disputed.charge, paymentIntentId: disputed.pi, amountCents: 1000, currency: 'usd', status: 'needs_response', balanceAmounts: null } }),
    ).toBe('dispute_taken');
    const plain = await topUp(account.id, 150);

    const { payments } = await api.data(api.viewer, PAYMENTS, { accountId: account.id });
    const common = { accountId: account.id, customerId: 'cus_test_admin', currency: 'usd' };
    expect(payments).toEqual([
      { ...common, checkoutSessionId: plain.session, paymentIntentId: plain.pi, amountCents: 150, amountUsd: '1.50', coins: 1500, status: 'credited', refundedCents: 0, reversals: [] },
      {
        ...common,
        checkoutSessionId: disputed.session,
        paymentIntentId: disputed.pi,
        amountCents: 1000,
        amountUsd: '10.00',
        coins: 10000,
        status: 'disputed',
        refundedCents: 0,
        reversals: [{ kind: 'dispute', stripeId: dp, amountCents: 1000, coins: -10000 }],
      },
      {
        ...common,
        checkoutSessionId: refunded.session,
        paymentIntentId: refunded.pi,
        amountCents: 2000,
        amountUsd: '20.00',
        coins: 20000,
        status: 'partially_refunded',
        refundedCents: 500,
        reversals: [{ kind: 'refund', stripeId: refunded.charge, amountCents: 500, coins: -5000 }],
      },
    ]);

    // Won: the dispute's coins come back, and the payment says so.
    expect(
      await handle({ ...base(), providerType: 'charge.dispute.closed', kind: 'dispute', stage: 'closed', dispute: { id: dp, chargeId: disputed.charge, paymentIntentId: disputed.pi, amountCents: 1000, currency: 'usd', status: 'won', balanceAmounts: null } }),
    ).toBe('dispute_won');
    const after = (await api.data(api.viewer, PAYMENTS, { accountId: account.id })).payments[1];
    expect(after).toMatchObject({ status: 'dispute_won', reversals: [{ kind: 'dispute', coins: -10000 }, { kind: 'dispute_won', coins: 10000 }] });
  });

  it('revenue per day: USD in, coins credited, spent and taken back, every day of the range', async () => {
    // 2001-02-03 is a day no other test writes: its rows are put in directly, the ledger entries
    // as the money functions would write them (the ledger takes inserts).
    const account = await makeAccount(api.orm);
    const em = api.orm.em.fork();
    const at = '2001-02-03T10:00:00Z';
    const entry = async (pocket: string, kind: string, micro: bigint) => {
      const [row] = await em.execute<{ id: string }[]>(
        `insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description, created_at)
         values (?, ?, ?, ?::bigint, 0, 'revenue-test', ?, 'test', ?::timestamptz) returning id::text`,
        [account.id, pocket, kind, micro.toString(), unique('key'), at],
      );
      return row!.id;
    };
    const COIN = 1_000_000n;
    const topup = await entry('purchased', 'topup', 12_340n * COIN); // 1234 cents
    await em.execute(
      `insert into payments (id, checkout_session_id, account_id, amount_cents, currency, coins_micro, event_id, ledger_entry_id, created_at) values (?, ?, ?, 1234, 'usd', ?::bigint, 'evt_x', ?::bigint, ?::timestamptz)`,
      [unique('pay'), unique('cs'), account.id, (12_340n * COIN).toString(), topup, at],
    );
    const grant = await entry('subscription', 'subscription_grant', 10_000n * COIN);
    const sub = unique('sub');
    await em.execute(`insert into subscriptions (id, account_id) values (?, ?)`, [sub, account.id]);
    await em.execute(
      `insert into subscription_grants (id, invoice_id, subscription_id, account_id, plan_name, amount_paid_cents, currency, coins_micro, event_id, ledger_entry_id, created_at)
       values (?, ?, ?, ?, 'Starter', 1000, 'usd', ?::bigint, 'evt_y', ?::bigint, ?::timestamptz)`,
      [unique('sgr'), unique('in'), sub, account.id, (10_000n * COIN).toString(), grant, at],
    );
    await entry('held', 'capture', -2_500_500_000n);
    await entry('purchased', 'payment_reversal', -5_000n * COIN);
    await entry('purchased', 'payment_reversal', 1_000n * COIN);

    const { revenuePerDay } = await api.data(api.viewer, `{ revenuePerDay(from: "2001-02-02", to: "2001-02-04") { day usdInCents usdIn coinsCredited coinsSpent coinsTakenBack } }`);
    const zero = { usdInCents: 0, usdIn: '0.00', coinsCredited: 0, coinsSpent: 0, coinsTakenBack: 0 };
    expect(revenuePerDay).toEqual([
      { day: '2001-02-02', ...zero },
      { day: '2001-02-03', usdInCents: 1234 + 1000, usdIn: '22.34', coinsCredited: 12_340 + 10_000, coinsSpent: 2500.5, coinsTakenBack: 4000 },
      { day: '2001-02-04', ...zero },
    ]);

    // A range over 366 days, or backwards, is refused as a client error, never a 500.
    const bad = await api.gql(api.viewer, `{ revenuePerDay(from: "2001-02-04", to: "2001-02-02") { day } }`);
    expect(bad.status).toBe(200);
    expect(bad.body.errors?.[0]?.extensions).toMatchObject({ code: 'BAD_USER_INPUT' });
  });

  it('revenue per day sums past 2^31 cents (21.47 M USD) in one day to the cent, and lists payments of 99,999,999 cents', async () => {
    // 2001-03-04 is a day no other test writes: 25 payments of Stripe's largest amount, 2,499,999,975 cents in all.
    const account = await makeAccount(api.orm);
    const em = api.orm.em.fork();
    const at = '2001-03-04T12:00:00Z';
    const CENTS = 99_999_999n;
    const coins = CENTS * 10n * 1_000_000n;
    for (let i = 0; i < 25; i++) {
      const [row] = await em.execute<{ id: string }[]>(
        `insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description, created_at)
         values (?, 'purchased', 'topup', ?::bigint, ?::bigint, 'revenue-big', ?, 'test', ?::timestamptz) returning id::text`,
        [account.id, coins.toString(), (coins * BigInt(i + 1)).toString(), unique('key'), at],
      );
      await em.execute(
        `insert into payments (id, checkout_session_id, account_id, amount_cents, currency, coins_micro, event_id, ledger_entry_id, created_at) values (?, ?, ?, ?, 'usd', ?::bigint, 'evt_x', ?::bigint, ?::timestamptz)`,
        [unique('pay'), unique('cs'), account.id, CENTS.toString(), coins.toString(), row!.id, at],
      );
    }
    const { revenuePerDay } = await api.data(api.viewer, `{ revenuePerDay(from: "2001-03-04", to: "2001-03-04") { day usdInCents usdIn coinsCredited } }`);
    expect(revenuePerDay).toEqual([{ day: '2001-03-04', usdInCents: 2_499_999_975, usdIn: '24999999.75', coinsCredited: 24_999_999_750 }]);
    const { payments } = await api.data(api.viewer, PAYMENTS, { accountId: account.id });
    expect(payments).toHaveLength(25);
    expect(payments[0]).toMatchObject({ amountCents: 99_999_999, amountUsd: '999999.99', coins: 999_999_990, status: 'credited', refundedCents: 0 });
  });

  it('ledgerEntries answers every kind the ledger writes (its check constraint), the payment_reversal of refunds and disputes included', async () => {
    const em = api.orm.em.fork();
    const [constraint] = await em.execute<{ def: string }[]>(`select pg_get_constraintdef(oid) as def from pg_constraint where conname = 'ledger_entries_kind_check'`);
    const kinds = [...constraint!.def.matchAll(/'(\w+)'::text/g)].map((m) => m[1]!);
    expect(kinds).toContain('payment_reversal');
    const account = await makeAccount(api.orm);
    for (const kind of kinds) {
      await em.execute(
        `insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, idempotency_key, description)
         values (?, 'purchased', ?, 1000000, 0, 'every-kind', ?, ?)`,
        [account.id, kind, unique('key'), kind],
      );
    }
    const all = await api.data(api.viewer, 'query($id: ID!) { account(id: $id) { ledgerEntries(first: 50) { edges { node { kind description } } } } }', { id: account.id });
    expect(all.account.ledgerEntries.edges.map((e: { node: { kind: string } }) => e.node.kind).sort()).toEqual([...kinds].sort());
    for (const kind of kinds) {
      const one = await api.data(api.viewer, `query($a: ID) { ledgerEntries(account: $a, filter: {kind: ${kind}}) { edges { node { kind } } } }`, { a: account.id });
      expect(one.ledgerEntries.edges, kind).toEqual([{ node: { kind } }]);
    }
    // A real refund's entry, as the webhook writes it.
    const paid = await makeAccount(api.orm);
    const p = await topUp(paid.id, 700);
    expect(await handle({ ...base(), providerType: 'charge.refunded', kind: 'refund', charge: { id: p.charge, paymentIntentId: p.pi, amountCents: 700, amountRefundedCents: 700, currency: 'usd' } })).toBe('refunded');
    const refunded = await api.data(api.viewer, 'query($id: ID!) { account(id: $id) { id ledgerEntries { edges { node { kind amountCoins } } } } }', { id: paid.id });
    expect(refunded.account.ledgerEntries.edges.map((e: { node: unknown }) => e.node)).toEqual(
      expect.arrayContaining([{ kind: 'topup', amountCoins: 7000 }, { kind: 'payment_reversal', amountCoins: -7000 }]),
    );
  });

  it('the admin dashboard shows revenue per day and the newest payments', async () => {
    const account = await makeAccount(api.orm);
    const paid = await topUp(account.id, 4321);
    const viewer = await api.internal().admin.users.create({ email: uniqueEmail('viewer'), role: 'viewer' });
    const session = await createCaller(createContext(api.deps, { kind: 'admin', token: null })).admin.session.redeemLink({ token: viewer.login_token, new_password: 'a long viewer passphrase 2026' });
    const res = await fetch(`${api.base}/admin`, { headers: { cookie: `mas_admin_session=${session.token}` } });
    expect(res.status).toBe(200);
    const page = await res.text();
    expect(page).toContain('Revenue per day, last 30 days');
    expect(page).toContain('Newest payments');
    // Other test files may pay at the same time, so only a payment row of this shape is certain (ours, or a newer one).
    // The amount in USD, then (after the coins and status) the Checkout Session and the PaymentIntent in one cell.
    // The dollars to the cent and the coins grouped by thousands (adapters/web/html.ts), each cell labelled for the phone's cards.
    expect(page).toMatch(/<td class="num"[^>]*>\$[\d,]+\.\d\d<\/td><td class="num"[^>]*>[\d,.]+<\/td><td[^>]*>\w+<\/td><td[^>]*><code class="id">cs_test_[0-9a-f]+<\/code><br><code class="id">pi_test_[0-9a-f]+<\/code><\/td>/);
    expect(paid.session).toMatch(/^cs_test_/);
  });
});
