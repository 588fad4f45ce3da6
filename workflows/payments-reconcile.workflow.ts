import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

const { creditPaymentsTheWebhookMissed } = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  // It heartbeats: a dead worker's run is retried within seconds (the schedule skips runs while one is open).
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '30 seconds', maximumAttempts: 5 },
});

/**
 * Run by the `mas-payments-reconcile` Temporal Schedule (hourly): lists the paid top-up
 * sessions and paid invoices of the last three days at Stripe and credits those the webhook
 * missed, with the webhook's own exactly-once keys (core/payments/reconcile.ts). Idempotent: a
 * second run credits nothing. Returns the number credited.
 */
export async function paymentsReconcileWorkflow(): Promise<number> {
  return creditPaymentsTheWebhookMissed();
}
