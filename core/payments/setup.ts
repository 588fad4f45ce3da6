import type { Logger } from 'pino';
import type { CoreDeps } from '../context.ts';
import { CoreError } from '../errors.ts';
import { PaymentProviderError, type PaymentProvider } from '../ports.ts';

/** The payment provider, or the error every payment use case answers while payments are off (no STRIPE_SECRET_KEY). */
export function paymentProvider(deps: Pick<CoreDeps, 'payments'>): PaymentProvider {
  if (deps.payments) return deps.payments;
  throw new CoreError('unavailable', 'Payments are not set up on this server: coins can only be added by its operator.', { reason: 'payments_not_configured' });
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
