import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningStripeMock } from '../../adapters/embedded/stripe-mock.ts';
import { stripeOnFirstUse } from '../../adapters/payments/provider.ts';
import { PaymentProviderError, PaymentWebhookError, type PaymentProvider } from '../../core/ports.ts';
import { startTestStripeMock } from '../support/stripe-mock.ts';

/** The Stripe adapter of the PaymentProvider port, against stripe-mock (Stripe's own mock of its API). */
const WEBHOOK_SECRET = 'whsec_test_payments_stripe_adapter';
let mock: RunningStripeMock;
let stripe: PaymentProvider;
beforeAll(async () => {
  mock = await startTestStripeMock();
  stripe = stripeOnFirstUse({ secretKey: 'sk_test_adapter', webhookSecret: WEBHOOK_SECRET, apiUrl: mock.url });
});
afterAll(() => mock.stop());

const back = { successUrl: 'http://localhost/account?checkout=success', cancelUrl: 'http://localhost/account?checkout=canceled' };

describe('the Stripe adapter', () => {
  it('makes Checkout Sessions for a top-up and for a plan, and a customer-portal link', async () => {
    const topUp = await stripe.checkoutTopUp({ ...back, accountId: 'acct_A', amountCents: 1234, currency: 'usd', description: '12,340 coins', idempotencyKey: 'topup:acct_A:1' });
    expect(topUp.id).toMatch(/^cs_/);
    expect(topUp.url).toMatch(/^https:\/\//);
    const saved = await stripe.checkoutTopUp({ ...back, accountId: 'acct_A', amountCents: 500, currency: 'usd', description: '5,000 coins', idempotencyKey: 'topup:acct_A:2', customerId: 'cus_1', saveForLater: true });
    expect(saved.id).toMatch(/^cs_/);
    const plan = await stripe.checkoutSubscription({ ...back, accountId: 'acct_A', priceId: 'price_123', idempotencyKey: 'plan:acct_A:1' });
    expect(plan.url).toMatch(/^https:\/\//);
    expect((await stripe.portalLink({ customerId: 'cus_1', returnUrl: 'http://localhost/account' })).url).toMatch(/^https:\/\//);
  });

  it("reads a payment's receipt from its charge (stripe-mock answers its fixture charge's receipt_url)", async () => {
    expect(await stripe.receiptUrl!('pi_test_receipt')).toMatch(/^https:\/\/.+\/receipts\//);
  });

  it('charges a saved card off-session, answering how it ended', async () => {
    const result = await stripe.chargeOffSession({ accountId: 'acct_A', customerId: 'cus_1', paymentMethodId: 'pm_1', amountCents: 2000, currency: 'usd', idempotencyKey: 'auto:acct_A:1', chargeId: 'atc_1' });
    expect(['succeeded', 'processing', 'requires_action', 'declined']).toContain(result.status);
  });

  it("answers Stripe's refusals as the port's errors", async () => {
    // stripe-mock checks every parameter against Stripe's OpenAPI document, as Stripe does.
    const refused = await stripe.checkoutTopUp({ ...back, accountId: 'acct_A', amountCents: Number.NaN, currency: 'usd', description: 'x', idempotencyKey: 'k' }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PaymentProviderError);
    expect(refused).toMatchObject({ kind: 'invalid_request', message: expect.stringMatching(/^Stripe refused the request: .*unit_amount/) });
    // stripe-mock takes test-mode keys only: a live key is refused, and the error does not carry it.
    const live = stripeOnFirstUse({ secretKey: 'sk_live_not_for_tests', webhookSecret: WEBHOOK_SECRET, apiUrl: mock.url });
    const unauthorized = await live.portalLink({ customerId: 'cus_1', returnUrl: 'http://localhost/account' }).catch((e: unknown) => e);
    expect(unauthorized).toBeInstanceOf(PaymentProviderError);
    expect((unauthorized as Error).message).not.toContain('sk_live_not_for_tests');
  });

  it('verifies a delivery on its raw bytes, and refuses a bad, stale or unreadable one', async () => {
    const payload = JSON.stringify({ id: 'evt_1', object: 'event', type: 'customer.created', created: 1_800_000_000, data: { object: { id: 'cus_1' } } });
    const now = new Date();
    const sign = (body: string, secret = WEBHOOK_SECRET, at = now) => Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: Math.floor(at.getTime() / 1000) });
    const bytes = (s: string) => new TextEncoder().encode(s);

    expect(await stripe.verifyWebhook(bytes(payload), sign(payload), now, 300)).toMatchObject({ eventId: 'evt_1', kind: 'ignored' });
    const refusal = async (body: string, header: string | undefined) => {
      const err = await stripe.verifyWebhook(bytes(body), header, now, 300).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PaymentWebhookError);
      return err as PaymentWebhookError;
    };
    expect(await refusal(payload, sign(payload, 'whsec_other'))).toMatchObject({ kind: 'signature', message: 'The signature does not match the body.' });
    expect(await refusal(`${payload} `, sign(payload))).toMatchObject({ kind: 'signature' });
    expect(await refusal(payload, sign(payload, WEBHOOK_SECRET, new Date(now.getTime() - 301_000)))).toMatchObject({ kind: 'signature', message: "The signature's timestamp is more than 300 seconds old." });
    expect(await refusal(payload, undefined)).toMatchObject({ kind: 'signature', message: 'The delivery carries no signature.' });
    expect(await refusal(payload, 'garbage')).toMatchObject({ kind: 'signature', message: 'The signature is malformed.' });
    expect(await refusal('not json', sign('not json'))).toMatchObject({ kind: 'payload', message: 'The body is not a JSON event.' });
    expect(await refusal('{"hello":1}', sign('{"hello":1}'))).toMatchObject({ kind: 'payload' });
  });
});
