import Stripe from 'stripe';
import {
  PaymentProviderError,
  PaymentWebhookError,
  type CheckoutLink,
  type CheckoutSessionFacts,
  type OffSessionChargeResult,
  type PaidInvoiceFacts,
  type PaymentEvent,
  type PaymentIntentFacts,
  type PaymentProvider,
} from '../../core/ports.ts';
import { listedIntent, listedInvoice, listedSession, METADATA, stripeEvent } from './stripe-events.ts';

export interface StripeOptions {
  secretKey: string;
  webhookSecret: string;
  /** `http(s)://host:port` instead of Stripe's API (stripe-mock in the tests). */
  apiUrl?: string | undefined;
  /** Per request; the SDK retries network failures and 5xx twice, with the same idempotency key. */
  timeoutMs?: number | undefined;
}

/** The metadata naming an organization's wallet and the owner acting: none on a personal payment. */
function organizationOf(r: { organizationId?: string | undefined; actingAccountId?: string | undefined }): Record<string, string> {
  if (!r.organizationId) return {};
  return { [METADATA.organization]: r.organizationId, ...(r.actingAccountId ? { [METADATA.actingAccount]: r.actingAccountId } : {}) };
}

/**
 * The PaymentProvider port on Stripe, through the official SDK: Checkout Sessions (top-ups,
 * subscriptions), the customer portal, off-session PaymentIntents, and webhook deliveries
 * verified on their raw bytes and read into domain events (stripe-events.ts). What a payment
 * is worth in coins is core's business (core/payments/); this only translates.
 */
export function stripePayments(opts: StripeOptions): PaymentProvider {
  const stripe = new Stripe(opts.secretKey, {
    ...apiAddress(opts.apiUrl),
    maxNetworkRetries: 2,
    timeout: opts.timeoutMs ?? 20_000,
    telemetry: false,
    appInfo: { name: 'model-access-service' },
  });

  return {
    async checkoutTopUp(r) {
      // A card kept for auto top-up says so on the session: its credit then turns auto top-up on.
      const metadata = { [METADATA.account]: r.accountId, [METADATA.purpose]: 'topup', ...(r.saveForLater ? { [METADATA.savesCard]: 'auto_topup' } : {}), ...organizationOf(r) };
      const session = await call(() =>
        stripe.checkout.sessions.create(
          {
            mode: 'payment',
            client_reference_id: r.accountId,
            metadata,
            line_items: [{ quantity: 1, price_data: { currency: r.currency, unit_amount: r.amountCents, product_data: { name: r.description } } }],
            payment_intent_data: { metadata, ...(r.saveForLater ? { setup_future_usage: 'off_session' as const } : {}) },
            ...(r.customerId ? { customer: r.customerId } : { customer_creation: 'always' as const, ...(r.customerEmail ? { customer_email: r.customerEmail } : {}) }),
            success_url: r.successUrl,
            cancel_url: r.cancelUrl,
          },
          { idempotencyKey: r.idempotencyKey },
        ),
      );
      return link(session);
    },

    async checkoutSubscription(r) {
      const metadata = { [METADATA.account]: r.accountId, [METADATA.purpose]: 'subscription', ...organizationOf(r) };
      const session = await call(() =>
        stripe.checkout.sessions.create(
          {
            mode: 'subscription',
            client_reference_id: r.accountId,
            metadata,
            // Copied onto each invoice (parent.subscription_details.metadata): invoice.paid names the account.
            subscription_data: { metadata },
            line_items: [{ price: r.priceId, quantity: 1 }],
            ...(r.customerId ? { customer: r.customerId } : r.customerEmail ? { customer_email: r.customerEmail } : {}),
            success_url: r.successUrl,
            cancel_url: r.cancelUrl,
          },
          { idempotencyKey: r.idempotencyKey },
        ),
      );
      return link(session);
    },

    async portalLink(r) {
      const session = await call(() => stripe.billingPortal.sessions.create({ customer: r.customerId, return_url: r.returnUrl }));
      return { url: session.url };
    },

    async chargeOffSession(r): Promise<OffSessionChargeResult> {
      try {
        const intent = await stripe.paymentIntents.create(
          {
            amount: r.amountCents,
            currency: r.currency,
            customer: r.customerId,
            payment_method: r.paymentMethodId,
            off_session: true,
            confirm: true,
            metadata: { [METADATA.account]: r.accountId, [METADATA.purpose]: 'auto_topup', [METADATA.charge]: r.chargeId, ...organizationOf(r) },
          },
          { idempotencyKey: r.idempotencyKey },
        );
        if (intent.status === 'succeeded') return { status: 'succeeded', paymentId: intent.id };
        if (intent.status === 'processing') return { status: 'processing', paymentId: intent.id };
        if (intent.status === 'requires_action') return { status: 'requires_action', paymentId: intent.id, reason: 'The bank asks the customer to confirm this payment.' };
        return { status: 'declined', paymentId: intent.id, reason: intent.last_payment_error?.message ?? `The payment ended as ${intent.status}.` };
      } catch (err) {
        if (err instanceof Stripe.errors.StripeCardError) {
          const paymentId = err.payment_intent?.id ?? null;
          if (err.code === 'authentication_required') return { status: 'requires_action', paymentId, reason: 'The bank asks the customer to confirm this payment.' };
          return { status: 'declined', paymentId, reason: err.decline_code ? `The card was declined (${err.decline_code}).` : 'The card was declined.' };
        }
        throw providerError(err);
      }
    },

    async paymentMethodOf(paymentIntentId) {
      const intent = await call(() => stripe.paymentIntents.retrieve(paymentIntentId));
      const method = intent.payment_method;
      return method === null ? null : typeof method === 'string' ? method : method.id;
    },

    async receiptUrl(paymentIntentId) {
      const intent = await call(() => stripe.paymentIntents.retrieve(paymentIntentId, { expand: ['latest_charge'] }));
      const charge = intent.latest_charge;
      return charge && typeof charge === 'object' ? (charge.receipt_url ?? null) : null;
    },

    async verifyWebhook(rawBody, signature, receivedAt, toleranceSeconds): Promise<PaymentEvent> {
      let event: unknown;
      try {
        event = await stripe.webhooks.constructEventAsync(Buffer.from(rawBody), signature ?? '', opts.webhookSecret, toleranceSeconds, undefined, receivedAt.getTime());
      } catch (err) {
        if (err instanceof Stripe.errors.StripeSignatureVerificationError) throw new PaymentWebhookError('signature', signatureProblem(err.message, toleranceSeconds));
        // The signature held; what it signed is not a JSON event.
        throw new PaymentWebhookError('payload', 'The body is not a JSON event.');
      }
      return stripeEvent(event);
    },

    async listPaidSince(since) {
      const created = { gte: Math.floor(since.getTime() / 1000) };
      const sessions: CheckoutSessionFacts[] = [];
      const invoices: PaidInvoiceFacts[] = [];
      const intents: PaymentIntentFacts[] = [];
      await call(() =>
        stripe.checkout.sessions.list({ created, status: 'complete', limit: 100 }).autoPagingEach((s) => {
          const facts = s.mode === 'payment' && s.payment_status === 'paid' ? listedSession(s) : null;
          if (facts) sessions.push(facts);
        }),
      );
      await call(() =>
        stripe.invoices.list({ created, status: 'paid', limit: 100 }).autoPagingEach((i) => {
          const facts = listedInvoice(i);
          if (facts) invoices.push(facts);
        }),
      );
      // The service's own off-session charges (auto top-up); Checkouts' intents are credited through their sessions.
      await call(() =>
        stripe.paymentIntents.list({ created, limit: 100 }).autoPagingEach((p) => {
          const facts = p.status === 'succeeded' ? listedIntent(p) : null;
          if (facts?.purpose === 'auto_topup') intents.push(facts);
        }),
      );
      return { sessions, invoices, intents };
    },
  };
}

/** STRIPE_API_URL as the SDK's host, port and protocol. */
function apiAddress(apiUrl: string | undefined): Pick<Stripe.StripeConfig, 'host' | 'port' | 'protocol'> {
  if (!apiUrl) return {};
  const url = new URL(apiUrl);
  const protocol = url.protocol === 'http:' ? 'http' : 'https';
  return { host: url.hostname, port: url.port || (protocol === 'http' ? 80 : 443), protocol };
}

function link(session: { id: string; url: string | null }): CheckoutLink {
  if (!session.url) throw new PaymentProviderError('failed', `Stripe made Checkout Session ${session.id} without a URL.`);
  return { id: session.id, url: session.url };
}

async function call<T>(request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (err) {
    throw providerError(err);
  }
}

/**
 * Stripe's errors as the port's. Their messages end up in logs, so any key in them is masked:
 * Stripe masks keys itself, but a server that answers in its place may not (stripe-mock
 * echoes the Authorization header it refuses).
 */
function providerError(err: unknown): unknown {
  if (!(err instanceof Stripe.errors.StripeError)) return err;
  const message = err.message.replace(/\b(sk|rk|pk)_(test|live)_[A-Za-z0-9_]+/g, '$1_$2_***').replace(/\bwhsec_[A-Za-z0-9_]+/g, 'whsec_***');
  if (err instanceof Stripe.errors.StripeIdempotencyError) return new PaymentProviderError('idempotency_conflict', `Stripe: ${message}`);
  if (err instanceof Stripe.errors.StripeInvalidRequestError) return new PaymentProviderError('invalid_request', `Stripe refused the request: ${message}`);
  return new PaymentProviderError('failed', `Stripe failed (${err.type}${err.statusCode ? `, HTTP ${err.statusCode}` : ''}): ${message}`);
}

/** The SDK's messages run to paragraphs with links; ours say what was wrong in one sentence. */
function signatureProblem(message: string, toleranceSeconds: number): string {
  if (/tolerance/i.test(message)) return `The signature's timestamp is more than ${toleranceSeconds} seconds old.`;
  if (/No stripe-signature header/i.test(message)) return 'The delivery carries no signature.';
  if (/No webhook payload/i.test(message)) return 'The delivery has no body.';
  if (/Unable to extract timestamp|No signatures found with expected scheme/i.test(message)) return 'The signature is malformed.';
  return 'The signature does not match the body.';
}
