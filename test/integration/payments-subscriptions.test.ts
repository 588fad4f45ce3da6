import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { getBalance } from '../../core/money/wallet.ts';
import { makeAccount, openTestOrm, testDeps, walletInvariants } from '../support/db.ts';
import { createTestApp, getJson, serve } from '../support/http.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';

/**
 * Subscriptions through Stripe's webhook: each paid invoice grants its plan's coins to the
 * subscription pocket once, and nothing after the subscription is deleted. Events are fixtures
 * signed as Stripe signs them.
 */
const SECRET = 'whsec_test_payments_subscriptions';
const STARTER = { name: 'Starter', priceId: 'price_starter', coinsPerPeriod: 10_000n * 1_000_000n };
let orm: MikroORM;
let mock: RunningStripeMock;
let api: Awaited<ReturnType<typeof serve>>;
beforeAll(async () => {
  orm = await openTestOrm();
  mock = await startTestStripeMock();
  const deps = testDeps(orm, { env: { STRIPE_SECRET_KEY: 'sk_test_PaymentsSubscriptions', STRIPE_WEBHOOK_SECRET: SECRET, STRIPE_API_URL: mock.url }, plans: [STARTER] });
  api = await serve(createTestApp({ deps }));
});
afterAll(async () => {
  await api?.close();
  await mock?.stop();
  await orm?.close();
});

const unique = (prefix: string) => `${prefix}_test_${randomBytes(8).toString('hex')}`;
const period = (n: number) => 1_800_000_000 + n * 30 * 86_400;

/** A paid invoice of a subscription the service started (its metadata names the account), as API version 2025-03-31 and later shape it. */
function paidInvoice(subscriptionId: string, accountId: string, n: number, over: Record<string, unknown> = {}) {
  return {
    id: unique('in'),
    object: 'invoice',
    status: 'paid',
    amount_paid: 1000,
    currency: 'usd',
    customer: 'cus_test_sub',
    parent: { type: 'subscription_details', subscription_details: { subscription: subscriptionId, metadata: { mas_account_id: accountId, mas_purpose: 'subscription' } } },
    lines: { data: [{ period: { start: period(n - 1), end: period(n) }, pricing: { price_details: { price: STARTER.priceId } } }] },
    ...over,
  };
}

function eventOf(type: string, object: object, id = unique('evt')): string {
  return JSON.stringify({ id, object: 'event', type, created: Math.floor(Date.now() / 1000), data: { object } });
}

const deliver = (payload: string) =>
  getJson(`${api.base}/webhooks/stripe`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret: SECRET }) },
    body: payload,
  });

async function grants(accountId: string) {
  return orm.em.fork().execute<{ kind: string; pocket: string; amount_micro: string; reference: string; description: string }[]>(
    'select kind, pocket, amount_micro::text, reference, description from ledger_entries where account_id = ? order by id',
    [accountId],
  );
}

describe('subscription invoices', () => {
  it('two paid periods give two grants; a replayed invoice, under its event id or another, gives none; after deletion nothing more', async () => {
    const account = await makeAccount(orm);
    const sub = unique('sub');
    const first = paidInvoice(sub, account.id, 1);
    const second = paidInvoice(sub, account.id, 2);
    const firstEvent = eventOf('invoice.paid', first);

    expect((await deliver(firstEvent)).body.outcome).toBe('credited');
    expect((await deliver(eventOf('invoice.paid', second))).body.outcome).toBe('credited');
    expect((await deliver(firstEvent)).body.outcome).toBe('duplicate_event');
    expect((await deliver(eventOf('invoice.paid', first))).body.outcome).toBe('already_credited');

    // 10,000 coins per period, twice: 20,000 coins in the subscription pocket.
    expect(await getBalance(orm.em.fork(), account.id)).toEqual({ subscription: 20_000_000_000n, purchased: 0n, held: 0n, paid: true });
    expect(await grants(account.id)).toEqual([
      { kind: 'subscription_grant', pocket: 'subscription', amount_micro: '10000000000', reference: first.id, description: 'Subscription coins' },
      { kind: 'subscription_grant', pocket: 'subscription', amount_micro: '10000000000', reference: second.id, description: 'Subscription coins' },
    ]);
    const [row] = await orm.em.fork().execute<{ plan_name: string; current_period_end: string; ended_at: string | null; grants: number }[]>(
      'select plan_name, current_period_end, ended_at, (select count(*) from subscription_grants g where g.subscription_id = s.id)::int as grants from subscriptions s where id = ?',
      [sub],
    );
    expect({ ...row, current_period_end: new Date(row!.current_period_end) }).toEqual({ plan_name: 'Starter', current_period_end: new Date(period(2) * 1000), ended_at: null, grants: 2 });

    const deleted = eventOf('customer.subscription.deleted', { id: sub, object: 'subscription', customer: 'cus_test_sub', status: 'canceled', metadata: { mas_account_id: account.id } });
    expect((await deliver(deleted)).body.outcome).toBe('subscription_ended');
    expect((await deliver(eventOf('customer.subscription.deleted', { id: sub, customer: 'cus_test_sub', metadata: {} }))).body.outcome).toBe('already_ended');
    // A third invoice after the deletion grants nothing, and is left to an operator.
    const third = paidInvoice(sub, account.id, 3);
    expect((await deliver(eventOf('invoice.paid', third))).body.outcome).toBe('subscription_ended');
    expect((await getBalance(orm.em.fork(), account.id)).subscription).toBe(20_000_000_000n);
    const [audit] = await orm.em.fork().execute<{ action: string; reason: string }[]>(`select action, reason from admin_audit_log where target_type = 'payment' and target_id = ?`, [third.id]);
    expect(audit).toEqual({ action: 'payment.not_credited', reason: 'the subscription had been deleted when this invoice arrived' });
    const state = await walletInvariants(orm, account.id);
    expect(state.ledgerTotal).toBe(20_000_000_000n);
  });

  it('an invoice.paid in the shape before API version 2025-03-31 (subscription and subscription_details on the invoice, no parent) grants its plan once, as the newer shape does', async () => {
    const account = await makeAccount(orm);
    const sub = unique('sub');
    const newer = paidInvoice(sub, account.id, 1);
    const { parent: _parent, lines: _lines, ...rest } = newer;
    const older = {
      ...rest,
      subscription: sub,
      subscription_details: { metadata: { mas_account_id: account.id, mas_purpose: 'subscription' } },
      lines: { data: [{ period: { start: period(0), end: period(1) }, price: { id: STARTER.priceId } }] },
    };
    expect((await deliver(eventOf('invoice.paid', older))).body.outcome).toBe('credited');
    expect((await deliver(eventOf('invoice.paid', newer))).body.outcome).toBe('already_credited');
    expect((await deliver(eventOf('invoice.paid', older))).body.outcome).toBe('already_credited');
    expect(await grants(account.id)).toEqual([{ kind: 'subscription_grant', pocket: 'subscription', amount_micro: '10000000000', reference: newer.id, description: 'Subscription coins' }]);
  });

  it('grants one invoice delivered many times at once exactly once', async () => {
    const account = await makeAccount(orm);
    const invoice = paidInvoice(unique('sub'), account.id, 1);
    const events = [eventOf('invoice.paid', invoice), eventOf('invoice.paid', invoice)];
    const answers = await Promise.all(Array.from({ length: 20 }, (_, k) => deliver(events[k % 2]!)));
    expect(answers.map((a) => a.body.outcome).sort()).toEqual(['already_credited', 'credited', ...Array(18).fill('duplicate_event')].sort());
    expect(await grants(account.id)).toHaveLength(1);
  });

  it('a deletion that arrives before any invoice still stops the grants', async () => {
    const account = await makeAccount(orm);
    const sub = unique('sub');
    expect((await deliver(eventOf('customer.subscription.deleted', { id: sub, customer: 'cus_1', metadata: { mas_account_id: account.id } }))).body.outcome).toBe('subscription_ended');
    expect((await deliver(eventOf('invoice.paid', paidInvoice(sub, account.id, 1)))).body.outcome).toBe('subscription_ended');
    expect(await grants(account.id)).toEqual([]);
  });

  it('grants nothing for an invoice of no money, of no subscription, of an unknown plan or account, or in another currency; the paid ones are audited', async () => {
    const account = await makeAccount(orm);
    const cases: [Record<string, unknown>, string, boolean][] = [
      [{ amount_paid: 0 }, 'nothing_paid', false],
      [{ parent: null }, 'not_a_subscription', false],
      [{ lines: { data: [{ pricing: { price_details: { price: 'price_unknown' } } }] } }, 'unknown_plan', true],
      [{ currency: 'eur' }, 'refused_currency', true],
    ];
    for (const [over, outcome, audited] of cases) {
      const invoice = paidInvoice(unique('sub'), account.id, 1, over);
      expect((await deliver(eventOf('invoice.paid', invoice))).body.outcome, outcome).toBe(outcome);
      const rows = await orm.em.fork().execute(`select 1 from admin_audit_log where target_type = 'payment' and target_id = ?`, [invoice.id]);
      expect(rows.length, outcome).toBe(audited ? 1 : 0);
    }
    const stranger = paidInvoice(unique('sub'), 'acct_nobody000000000000000000', 1);
    expect((await deliver(eventOf('invoice.paid', stranger))).body.outcome).toBe('unknown_account');
    expect(await grants(account.id)).toEqual([]);
    expect((await getBalance(orm.em.fork(), account.id)).paid).toBe(false);
  });

  it('a plan bought through Checkout credits nothing at the checkout: its invoices do', async () => {
    const account = await makeAccount(orm);
    const session = { id: unique('cs'), object: 'checkout.session', mode: 'subscription', client_reference_id: account.id, metadata: { mas_account_id: account.id, mas_purpose: 'subscription' }, payment_status: 'paid', amount_total: 1000, currency: 'usd', customer: 'cus_1', payment_intent: null, subscription: unique('sub') };
    expect((await deliver(eventOf('checkout.session.completed', session))).body.outcome).toBe('subscription_checkout');
    expect(await grants(account.id)).toEqual([]);
  });
});
