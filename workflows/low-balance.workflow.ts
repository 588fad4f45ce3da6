import { proxyActivities } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

const { mailLowBalanceNotices } = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  // It heartbeats: a dead worker's run is retried within seconds (the schedule skips runs while one is open).
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '5 seconds', maximumAttempts: 5 },
});

/**
 * Run by the `mas-low-balance` Temporal Schedule (every minute): mails each account whose
 * balance fell below the threshold it set, once per crossing (core/accounts/low-balance.ts: the
 * account is marked in the statement that finds it, so a retried or concurrent run mails no
 * one twice). Returns the number of mails sent.
 */
export async function lowBalanceNoticeWorkflow(): Promise<number> {
  return mailLowBalanceNotices();
}
