import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

/** Webhook delivery: retried with backoff (1 s doubling to 10 min, 10 attempts, about 17 minutes). */
const notify = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 minutes', maximumAttempts: 10 },
});

/**
 * Delivers a job's webhook (core/webhooks): started by the job's workflow as it closes, as a
 * child that outlives it, so the job's workflow closes when the job ends. Completed once
 * delivered; Failed when every attempt failed.
 */
export async function webhookDeliveryWorkflow(jobId: string): Promise<void> {
  await notify.deliverJobWebhook(jobId);
}
