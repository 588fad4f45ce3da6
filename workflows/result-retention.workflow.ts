import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

const { deleteExpiredResults } = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  // It heartbeats: a dead worker's run is retried within seconds (the schedule skips runs while one is open).
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '5 seconds', maximumAttempts: 5 },
});

/**
 * Run by the `mas-result-retention` Temporal Schedule: deletes the stored results of jobs whose
 * retention (RESULT_RETENTION_SECONDS after they succeeded) has passed, in batches
 * (core/generations/retention.ts). Idempotent; the schedule skips a run while one still goes.
 * Returns the number of results deleted.
 */
export async function resultRetentionWorkflow(): Promise<number> {
  return deleteExpiredResults();
}
