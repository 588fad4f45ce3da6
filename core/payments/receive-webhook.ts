import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import type { CoreDeps } from '../context.ts';
import { invalid } from '../errors.ts';
import { PaymentWebhookError, type PaymentEvent } from '../ports.ts';
import { creditAutoTopUp } from './auto-top-up.ts';
import { creditTopUp } from './credit-top-up.ts';
import type { EventOutcome } from './outcome.ts';
import { paymentProvider } from './setup.ts';
import { handleDispute, recordRefundObject, takeBackRefund } from './reversals.ts';
import { endSubscription, grantInvoice } from './subscriptions.ts';

export const webhookInput = z.object({
  /** The body exactly as it arrived: the signature is over these bytes. */
  body: z.custom<Uint8Array>((v) => v instanceof Uint8Array, 'must be the raw bytes of the body'),
  signature: z.string().max(16_384).optional(),
});

export const webhookReceiptSchema = z
  .object({
    object: z.literal('payment_webhook'),
    event: z.string(),
    type: z.string(),
    outcome: z.string().describe('what the service did: credited, already_credited, duplicate_event, awaiting_payment, ignored, …'),
  })
  .strict();
export type WebhookReceipt = z.infer<typeof webhookReceiptSchema>;

/**
 * One delivery of the payment provider's webhook: verified on its raw bytes (a bad, stale or
 * unreadable delivery is refused and writes nothing), then handled once per event id. Every
 * verified event is answered as received, whatever it led to, so that the provider stops
 * retrying it; only a failure here (the database) makes it retry.
 */
export async function receivePaymentWebhook(
  deps: Pick<CoreDeps, 'payments' | 'config' | 'clock' | 'logger'>,
  em: EntityManager,
  input: z.output<typeof webhookInput>,
): Promise<WebhookReceipt> {
  const provider = paymentProvider(deps, { for: 'webhook' });
  let event: PaymentEvent;
  try {
    event = await provider.verifyWebhook(input.body, input.signature, deps.clock(), deps.config.payments.webhookToleranceSeconds);
  } catch (err) {
    if (!(err instanceof PaymentWebhookError)) throw err;
    throw err.kind === 'signature' ? invalid('signature', err.message, 'invalid_webhook_signature') : invalid('body', err.message, 'invalid_webhook_payload');
  }
  const outcome = await handlePaymentEvent(deps, em, event);
  if (outcome.alert) deps.logger.warn({ event: event.eventId, type: event.providerType, outcome: outcome.outcome, account: outcome.accountId }, outcome.outcome === 'reversal_pending' ? 'refund or dispute of a payment not credited (yet): kept, see the admin audit log' : 'payment received but not credited: see the admin audit log');
  return { object: 'payment_webhook', event: event.eventId, type: event.providerType, outcome: outcome.outcome };
}

/**
 * Handles a verified event exactly once per event id: its row in payment_events is inserted
 * first, in the transaction that acts on it, so a concurrent delivery of the same event waits
 * for that transaction and then finds the row (`duplicate_event`); one that fails rolls the row
 * back with everything else, and the provider's retry finds nothing done.
 */
export async function handlePaymentEvent(deps: Pick<CoreDeps, 'config'>, em: EntityManager, event: PaymentEvent): Promise<EventOutcome> {
  return em.transactional(async (tx) => {
    const fresh = await tx.execute<{ event_id: string }[]>(
      `insert into payment_events (event_id, type, object_id, outcome, event_created_at) values (?, ?, ?, 'received', ?)
       on conflict (event_id) do nothing returning event_id`,
      [event.eventId, event.providerType, objectId(event), event.createdAt],
    );
    if (fresh.length === 0) return { outcome: 'duplicate_event', accountId: null, alert: false };
    const outcome = await act(deps, tx, event);
    await tx.execute('update payment_events set outcome = ?, account_id = ? where event_id = ?', [outcome.outcome, outcome.accountId, event.eventId]);
    return outcome;
  });
}

async function act(deps: Pick<CoreDeps, 'config'>, tx: EntityManager, event: PaymentEvent): Promise<EventOutcome> {
  switch (event.kind) {
    case 'checkout_session':
      return creditTopUp(deps, tx, event);
    case 'payment_intent':
      return creditAutoTopUp(deps, tx, event);
    case 'invoice_paid':
      return grantInvoice(deps, tx, event);
    case 'subscription_deleted':
      return endSubscription(tx, event);
    case 'ignored':
      return { outcome: 'ignored', accountId: null, alert: false };
    case 'refund':
      return takeBackRefund(deps, tx, event);
    case 'refund_object':
      return recordRefundObject(deps, tx, event);
    case 'dispute':
      return handleDispute(deps, tx, event);
  }
}

function objectId(event: PaymentEvent): string | null {
  switch (event.kind) {
    case 'checkout_session':
      return event.session.id;
    case 'payment_intent':
      return event.intent.id;
    case 'invoice_paid':
      return event.invoice.id;
    case 'subscription_deleted':
      return event.subscription.id;
    case 'refund':
      return event.charge.id;
    case 'refund_object':
      return event.refund.id;
    case 'dispute':
      return event.dispute.id;
    case 'ignored':
      return null;
  }
}
