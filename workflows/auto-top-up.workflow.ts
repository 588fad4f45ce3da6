import { proxyActivities, uuid4 } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

const { chargeSavedCardForAutoTopUp } = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  // A network failure or a Stripe 5xx is retried with the same charge id, so with the same
  // idempotency key: Stripe answers a retry with the first attempt's result, never a second charge.
  retry: { initialInterval: '5 seconds', backoffCoefficient: 2, maximumInterval: '2 minutes', maximumAttempts: 8 },
});

/**
 * An account's auto top-up (docs/payments.md): started when a settle leaves its purchased
 * coins under its threshold, at most one per account at a time (the workflow id is
 * `auto-topup-<account>`). It charges the saved card once, off-session, under a charge id made
 * here (deterministic on replay); the coins come with the payment's webhook, as for any
 * top-up. Returns what happened: charged, declined, requires_action, daily_limit, …
 */
export async function autoTopUpWorkflow(accountId: string): Promise<string> {
  return chargeSavedCardForAutoTopUp(accountId, `atc_${uuid4().replaceAll('-', '')}`);
}
