import { describe, expect, it } from 'vitest';
import { stripeEvent } from '../../adapters/payments/stripe-events.ts';
import { ConfigError, loadEnv } from '../../config/env.ts';
import { centsToMicro, parseUsdCents } from '../../core/payments/amounts.ts';
import { PlansError, validatePlans } from '../../core/payments/plans.ts';
import { disputeState } from '../../core/payments/reversals.ts';
import { PaymentWebhookError } from '../../core/ports.ts';

describe('payment settings', () => {
  it('are off by default, with top-ups from 5 to 10,000 USD in USD', () => {
    const env = loadEnv({});
    expect(env.STRIPE_SECRET_KEY).toBeUndefined();
    expect(env).toMatchObject({ STRIPE_CURRENCY: 'usd', TOPUP_MIN_USD: 500, TOPUP_MAX_USD: 1_000_000 });
    expect(env.PLANS_FILE).toMatch(/config\/plans\.yaml$/);
  });

  it('take a key with its webhook secret, and stripe-mock as the API', () => {
    const env = loadEnv({ STRIPE_SECRET_KEY: 'sk_test_abc', STRIPE_WEBHOOK_SECRET: 'whsec_xyz', STRIPE_API_URL: 'http://127.0.0.1:12111', TOPUP_MIN_USD: '0.50', TOPUP_MAX_USD: '250.25' });
    expect(env).toMatchObject({ STRIPE_SECRET_KEY: 'sk_test_abc', STRIPE_WEBHOOK_SECRET: 'whsec_xyz', STRIPE_API_URL: 'http://127.0.0.1:12111', TOPUP_MIN_USD: 50, TOPUP_MAX_USD: 25_025 });
  });

  it('refuse what would make payments wrong, naming the variable and never echoing a secret', () => {
    const refused = (vars: Record<string, string>, pattern: RegExp) => {
      let error: unknown;
      try {
        loadEnv(vars);
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toMatch(pattern);
      for (const value of Object.values(vars)) if (/^(sk|whsec)_/.test(value)) expect((error as Error).message).not.toContain(value);
    };
    refused({ STRIPE_SECRET_KEY: 'sk_test_abc' }, /STRIPE_WEBHOOK_SECRET: is required when STRIPE_SECRET_KEY is set/);
    refused({ STRIPE_SECRET_KEY: 'pk_test_abc', STRIPE_WEBHOOK_SECRET: 'whsec_x' }, /STRIPE_SECRET_KEY: must be a Stripe secret key/);
    refused({ STRIPE_SECRET_KEY: 'sk_test_abc', STRIPE_WEBHOOK_SECRET: 'secret' }, /STRIPE_WEBHOOK_SECRET: .*\(got "\*\*\*"\)/);
    refused({ STRIPE_API_URL: 'http://127.0.0.1:12111/v1' }, /STRIPE_API_URL: must be http\(s\):\/\/host:port, with no path/);
    refused({ STRIPE_API_URL: 'ftp://x' }, /STRIPE_API_URL/);
    refused({ STRIPE_CURRENCY: 'eur' }, /STRIPE_CURRENCY: must be usd/);
    refused({ TOPUP_MIN_USD: '0.49' }, /TOPUP_MIN_USD: must be an amount in USD from 0.50/);
    refused({ TOPUP_MAX_USD: '5.001' }, /TOPUP_MAX_USD/);
    refused({ TOPUP_MIN_USD: '20', TOPUP_MAX_USD: '10' }, /TOPUP_MIN_USD: must not be more than TOPUP_MAX_USD/);
  });
});

describe('dollars and coins', () => {
  it('reads dollars as exact cents, refusing what is not an amount', () => {
    expect(parseUsdCents('5')).toBe(500);
    expect(parseUsdCents(12.34)).toBe(1234);
    expect(parseUsdCents('12.5')).toBe(1250);
    expect(parseUsdCents(0.1 + 0.2)).toBeNull(); // 0.30000000000000004: not what anyone typed
    for (const bad of ['-1', '1.234', '1e3', '', ' ', 'NaN', Infinity, null, true, {}, '0x10']) expect(parseUsdCents(bad)).toBeNull();
  });

  it('one cent buys 10 coins, 1 USD 1000', () => {
    expect(centsToMicro(1)).toBe(10_000_000n);
    expect(centsToMicro(100)).toBe(1000n * 1_000_000n);
    expect(centsToMicro(1234)).toBe(12_340n * 1_000_000n);
  });
});

describe('plans', () => {
  it('are read with coins per period, none by default', () => {
    expect(validatePlans({ plans: [] })).toEqual([]);
    expect(validatePlans(null)).toEqual([]);
    expect(validatePlans({ plans: [{ name: 'Starter', stripe_price_id: 'price_123', coins_per_period: 10000 }] })).toEqual([{ name: 'Starter', priceId: 'price_123', coinsPerPeriod: 10_000_000_000n }]);
  });

  it('may state the price and the period, for the pages', () => {
    expect(validatePlans({ plans: [{ name: 'Pro', stripe_price_id: 'price_9', coins_per_period: 50000, price_usd: '45', period: 'month' }] })).toEqual([
      { name: 'Pro', priceId: 'price_9', coinsPerPeriod: 50_000_000_000n, priceCents: 4500, period: 'month' },
    ]);
    expect(() => validatePlans({ plans: [{ name: 'Pro', stripe_price_id: 'price_9', coins_per_period: 1, price_usd: '4.999' }] })).toThrow(/price_usd: must be an amount in US dollars/);
    expect(() => validatePlans({ plans: [{ name: 'Pro', stripe_price_id: 'price_9', coins_per_period: 1, period: 'fortnight' }] })).toThrow(/period/);
  });

  it('refuse a bad file in one line naming the place', () => {
    const plan = { name: 'Starter', stripe_price_id: 'price_123', coins_per_period: '10' };
    expect(() => validatePlans({ plans: [{ ...plan, stripe_price_id: 'prod_1' }] })).toThrow(/^plans: plans\.0\.stripe_price_id: must be a Stripe price id/);
    expect(() => validatePlans({ plans: [{ ...plan, coins_per_period: 0 }] })).toThrow(/coins_per_period: must be more than 0/);
    expect(() => validatePlans({ plans: [plan, { ...plan, stripe_price_id: 'price_456' }] })).toThrow(/plans\.1\.name: Starter appears twice/);
    expect(() => validatePlans({ plans: [{ ...plan, extra: 1 }] })).toThrow(PlansError);
  });
});

describe('Stripe events as domain events', () => {
  const event = (type: string, object: Record<string, unknown>) => ({ id: 'evt_1', object: 'event', type, created: 1_800_000_000, data: { object } });
  const session = {
    id: 'cs_test_1',
    object: 'checkout.session',
    mode: 'payment',
    client_reference_id: 'acct_A',
    metadata: { mas_purpose: 'topup', mas_account_id: 'acct_A' },
    payment_status: 'paid',
    amount_total: 1234,
    currency: 'USD',
    customer: { id: 'cus_1', object: 'customer' },
    payment_intent: 'pi_1',
  };

  it('reads a Checkout Session as it is, leaving what it is worth to core', () => {
    expect(stripeEvent(event('checkout.session.completed', session))).toEqual({
      eventId: 'evt_1',
      providerType: 'checkout.session.completed',
      createdAt: new Date(1_800_000_000_000),
      kind: 'checkout_session',
      stage: 'completed',
      session: { id: 'cs_test_1', mode: 'payment', accountId: 'acct_A', purpose: 'topup', paymentStatus: 'paid', amountTotalCents: 1234, currency: 'usd', customerId: 'cus_1', paymentIntentId: 'pi_1', savesCard: false },
    });
    // A Checkout that keeps the card for auto top-up says so.
    const saving = stripeEvent(event('checkout.session.completed', { ...session, metadata: { ...session.metadata, mas_saves_card: 'auto_topup' } }));
    expect(saving).toMatchObject({ session: { savesCard: true } });
    const later = stripeEvent(event('checkout.session.async_payment_succeeded', { ...session, client_reference_id: null, amount_total: null }));
    expect(later).toMatchObject({ kind: 'checkout_session', stage: 'async_payment_succeeded', session: { accountId: 'acct_A', amountTotalCents: null } });
  });

  it("reads a PaymentIntent's success or failure, with the service's metadata (auto top-up)", () => {
    const intent = {
      id: 'pi_2',
      object: 'payment_intent',
      metadata: { mas_purpose: 'auto_topup', mas_account_id: 'acct_A', mas_charge_id: 'atc_1' },
      amount_received: 2500,
      currency: 'USD',
      customer: 'cus_1',
    };
    expect(stripeEvent(event('payment_intent.succeeded', intent))).toMatchObject({
      kind: 'payment_intent',
      stage: 'succeeded',
      intent: { id: 'pi_2', purpose: 'auto_topup', accountId: 'acct_A', chargeId: 'atc_1', amountReceivedCents: 2500, currency: 'usd', customerId: 'cus_1', failure: null },
    });
    expect(stripeEvent(event('payment_intent.payment_failed', { ...intent, amount_received: 0, last_payment_error: { code: 'card_declined', message: 'Your card was declined.' } }))).toMatchObject({
      kind: 'payment_intent',
      stage: 'failed',
      intent: { amountReceivedCents: 0, failure: 'Your card was declined.' },
    });
    // A Checkout's own intent carries no purpose of ours: read, and left to core to ignore.
    expect(stripeEvent(event('payment_intent.succeeded', { ...intent, metadata: {} }))).toMatchObject({ intent: { purpose: null, chargeId: null } });
  });

  it('reads invoices, deleted subscriptions, refunds and disputes; ignores other types', () => {
    const invoice = {
      id: 'in_1',
      amount_paid: 1000,
      currency: 'usd',
      customer: 'cus_1',
      parent: { subscription_details: { subscription: 'sub_1', metadata: { mas_account_id: 'acct_A' } } },
      lines: { data: [{ period: { end: 1_800_100_000 }, pricing: { price_details: { price: 'price_1' } } }] },
    };
    expect(stripeEvent(event('invoice.paid', invoice))).toMatchObject({
      kind: 'invoice_paid',
      invoice: { id: 'in_1', subscriptionId: 'sub_1', accountId: 'acct_A', priceIds: ['price_1'], amountPaidCents: 1000, periodEnd: new Date(1_800_100_000_000) },
    });
    expect(stripeEvent(event('customer.subscription.deleted', { id: 'sub_1', customer: 'cus_1', metadata: { mas_account_id: 'acct_A' } }))).toMatchObject({
      kind: 'subscription_deleted',
      subscription: { id: 'sub_1', accountId: 'acct_A' },
    });
    expect(stripeEvent(event('charge.refunded', { id: 'ch_1', payment_intent: 'pi_1', amount: 1000, amount_refunded: 400, currency: 'usd' }))).toMatchObject({
      kind: 'refund',
      charge: { amountRefundedCents: 400 },
    });
    expect(stripeEvent(event('charge.dispute.closed', { id: 'dp_1', charge: 'ch_1', payment_intent: null, amount: 1000, currency: 'usd', status: 'lost' }))).toMatchObject({
      kind: 'dispute',
      stage: 'closed',
      dispute: { status: 'lost' },
    });
    expect(stripeEvent(event('customer.created', { id: 'cus_1' }))).toMatchObject({ kind: 'ignored', providerType: 'customer.created' });
  });

  it('reads invoice.paid in the shape before API version 2025-03-31 (subscription and subscription_details.metadata on the invoice) as the newer one', () => {
    const older = {
      id: 'in_2',
      amount_paid: 1000,
      currency: 'usd',
      customer: 'cus_1',
      subscription: 'sub_1',
      subscription_details: { metadata: { mas_account_id: 'acct_A', mas_purpose: 'subscription' } },
      lines: { data: [{ period: { end: 1_800_100_000 }, price: { id: 'price_1' } }] },
    };
    const newer = {
      ...older,
      subscription: undefined,
      subscription_details: undefined,
      parent: { type: 'subscription_details', subscription_details: { subscription: 'sub_1', metadata: { mas_account_id: 'acct_A', mas_purpose: 'subscription' } } },
      lines: { data: [{ period: { end: 1_800_100_000 }, pricing: { price_details: { price: 'price_1' } } }] },
    };
    const expected = { id: 'in_2', subscriptionId: 'sub_1', customerId: 'cus_1', accountId: 'acct_A', priceIds: ['price_1'], amountPaidCents: 1000, currency: 'usd', periodEnd: new Date(1_800_100_000_000) };
    expect(stripeEvent(event('invoice.paid', older))).toMatchObject({ kind: 'invoice_paid', invoice: expected });
    expect(stripeEvent(event('invoice.paid', newer))).toMatchObject({ kind: 'invoice_paid', invoice: expected });
  });

  it('reads every dispute event with its balance transactions, and refund objects (refund.created, refund.updated, refund.failed, charge.refund.updated)', () => {
    const dispute = { id: 'dp_1', charge: 'ch_1', payment_intent: 'pi_1', amount: 1000, currency: 'usd', status: 'needs_response' };
    for (const stage of ['created', 'updated', 'funds_withdrawn', 'funds_reinstated', 'closed'] as const) {
      expect(stripeEvent(event(`charge.dispute.${stage}`, dispute))).toMatchObject({
        kind: 'dispute',
        stage,
        dispute: { id: 'dp_1', chargeId: 'ch_1', paymentIntentId: 'pi_1', amountCents: 1000, currency: 'usd', status: 'needs_response', balanceAmounts: null },
      });
    }
    const withdrawn = { ...dispute, balance_transactions: [{ id: 'txn_1', object: 'balance_transaction', amount: -1000, fee: 1500 }] };
    expect(stripeEvent(event('charge.dispute.funds_withdrawn', withdrawn))).toMatchObject({ dispute: { balanceAmounts: [-1000] } });
    expect(stripeEvent(event('charge.dispute.updated', { ...dispute, balance_transactions: [] }))).toMatchObject({ dispute: { balanceAmounts: [] } });
    // Balance transactions only named by id say nothing of the funds: unknown, not a refused event.
    expect(stripeEvent(event('charge.dispute.closed', { ...dispute, balance_transactions: ['txn_1'] }))).toMatchObject({ dispute: { balanceAmounts: null } });
    const refund = { id: 're_1', object: 'refund', amount: 400, charge: 'ch_1', payment_intent: 'pi_1', currency: 'USD', status: 'failed' };
    for (const type of ['refund.created', 'refund.updated', 'refund.failed', 'charge.refund.updated']) {
      expect(stripeEvent(event(type, refund))).toMatchObject({
        kind: 'refund_object',
        providerType: type,
        refund: { id: 're_1', chargeId: 'ch_1', paymentIntentId: 'pi_1', amountCents: 400, currency: 'usd', status: 'failed' },
      });
    }
    expect(() => stripeEvent(event('refund.updated', { ...refund, status: undefined }))).toThrow(PaymentWebhookError);
  });

  it('refuses what is not an event, or an event of a used type whose object cannot be read', () => {
    for (const raw of [[], { id: 'evt_1' }, { ...event('x', {}), object: 'v2.core.event' }, 'text', null]) {
      expect(() => stripeEvent(raw)).toThrow(PaymentWebhookError);
    }
    expect(() => stripeEvent(event('checkout.session.completed', { ...session, amount_total: 12.5 }))).toThrow(/checkout\.session\.completed event's object cannot be read: amount_total/);
    expect(() => stripeEvent(event('checkout.session.completed', { ...session, mode: 'other' }))).toThrow(PaymentWebhookError);
  });
});

describe("a dispute event's state of the funds (core/payments/reversals.ts disputeState)", () => {
  it('follows Stripe: inquiries withdraw nothing, chargebacks withdraw, won or reinstated gives back, lost keeps, an inquiry closed never took', () => {
    const cases: [Parameters<typeof disputeState>, ReturnType<typeof disputeState>][] = [
      [['created', 'warning_needs_response', null], 'inquiry'],
      [['updated', 'warning_under_review', []], 'inquiry'],
      [['created', 'needs_response', null], 'withdrawn'],
      [['updated', 'under_review', [-1000]], 'withdrawn'],
      // A chargeback whose event shows no balance transaction yet: its funds_withdrawn will say.
      [['created', 'needs_response', []], 'inquiry'],
      // An inquiry escalated: funds_withdrawn, whatever the status says.
      [['funds_withdrawn', 'warning_needs_response', null], 'withdrawn'],
      [['funds_reinstated', 'under_review', null], 'won'],
      [['updated', 'under_review', [-1000, 1000]], 'won'],
      [['closed', 'won', null], 'won'],
      [['closed', 'lost', [-1000]], 'lost'],
      [['closed', 'warning_closed', []], 'closed'],
      [['closed', 'prevented', null], 'closed'],
      [['updated', 'some_new_status', null], 'inquiry'],
    ];
    for (const [args, state] of cases) expect(disputeState(...args), args.join(' ')).toBe(state);
  });
});
