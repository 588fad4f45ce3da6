import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

// A first run on a large ledger rebuilds every day it holds: minutes, not seconds.
const { refreshAnalytics } = proxyActivities<Activities>({
  startToCloseTimeout: '15 minutes',
  // It heartbeats: a dead worker's run is retried within seconds (the schedule skips runs while one is open).
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '5 seconds', maximumAttempts: 5 },
});

/**
 * Run by the `mas-analytics-refresh` Temporal Schedule: rebuilds the usage analytics' daily
 * rollups for the days that changed since the last run (core/admin/analytics/refresh.ts).
 * Idempotent, so a retried or repeated run is harmless; the schedule skips a run while one is
 * still going. Returns the number of days rebuilt.
 */
export async function analyticsRefreshWorkflow(): Promise<number> {
  return refreshAnalytics();
}
