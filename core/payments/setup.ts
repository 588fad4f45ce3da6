import type { Logger } from 'pino';
import type { CoreDeps } from '../context.ts';
import { CoreError } from '../errors.ts';
import { PaymentProviderError, type PaymentProvider } from '../ports.ts';

/**
 * The payment provider, or the error every payment use case answers while payments are off (no
 * STRIPE_SECRET_KEY). For a customer's request (checkout, subscription, portal, auto top-up) that
 * is the operator's choice not to sell by card, not a failure of the server: a refusal (403). For
 * Stripe's webhook (`for: 'webhook'`) it is a server not yet set up for events Stripe already
 * sends: unavailable (503), which Stripe retries until the keys are set.
 */
export function paymentProvider(deps: Pick<CoreDeps, 'payments'>, opts: { for?: 'customer' | 'webhook' } = {}): PaymentProvider {
  if (deps.payments) return deps.payments;
  throw new CoreError(opts.for === 'webhook' ? 'unavailable' : 'forbidden', 'Payments are not set up on this server: coins can only be added by its operator.', { reason: 'payments_not_configured' });
}

/** A failure of the payment provider as core's error; the provider's own words go to the log, not to the customer. */
export function providerFailure(err: unknown, logger: Logger, doing: string): unknown {
  if (!(err instanceof PaymentProviderError)) return err;
  if (err.kind === 'idempotency_conflict') {
    return new CoreError('idempotency_conflict', 'This idempotency key was already used for a different payment.', { param: 'idempotency_key' });
  }
  logger.warn({ err: { message: err.message, kind: err.kind } }, `payment provider failed ${doing}`);
  return new CoreError('upstream_failed', `The payment provider failed ${doing}. Retry shortly.`, { reason: 'payment_provider_failed' });
}
