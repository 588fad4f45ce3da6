import type { PaymentProvider } from '../../core/ports.ts';
import { loadOnce } from '../load-once.ts';
import type { StripeOptions } from './stripe.ts';

/**
 * The Stripe provider, its SDK imported on the first payment call: a process that takes no
 * payment (the CLI, a worker, an instance nobody pays through) never holds it.
 */
export function stripeOnFirstUse(opts: StripeOptions): PaymentProvider {
  const provider = loadOnce(async () => (await import('./stripe.ts')).stripePayments(opts));
  return {
    checkoutTopUp: async (r) => (await provider()).checkoutTopUp(r),
    checkoutSubscription: async (r) => (await provider()).checkoutSubscription(r),
    portalLink: async (r) => (await provider()).portalLink(r),
    chargeOffSession: async (r) => (await provider()).chargeOffSession(r),
    paymentMethodOf: async (id) => (await provider()).paymentMethodOf(id),
    receiptUrl: async (id) => (await provider()).receiptUrl?.(id) ?? null,
    verifyWebhook: async (body, signature, receivedAt, tolerance) => (await provider()).verifyWebhook(body, signature, receivedAt, tolerance),
    listPaidSince: async (since) => (await provider()).listPaidSince(since),
  };
}
