import { patched, proxyActivities } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

// The Schedule skips every run while one is open, so a run whose worker died mid-activity (an
// API SIGKILLed) held back every sweep, and the reservations it left, until its timeout passed:
// the steps heartbeat, and a missed heartbeat (10 s) retries them on another worker. Each
// attempt keeps what it released; a retry carries on.
const { releaseExpiredHolds, restartStaleGenerations, failJobsWhoseWorkflowClosed } = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '1 second', maximumAttempts: 5 },
});

/**
 * Run by a Temporal Schedule: releases reservations whose expiry has passed (left by a process
 * that died between reserve and settle), starts the workflows of jobs left queued, and fails and
 * refunds the jobs whose workflow closed without ending them (an operator's Terminate, a
 * time-out, a reset). Idempotent, so overlapping or repeated runs are harmless; each hold still
 * ends exactly once.
 */
export async function holdSweepWorkflow(): Promise<number> {
  if (patched('release-holds-first')) {
    // Money first: a failure to restart a job must never keep expired holds open.
    const released = await releaseExpiredHolds();
    // Jobs accepted but never started (a crash between the HTTP answer and the workflow start).
    await restartStaleGenerations();
    // Jobs whose workflow an operator terminated, or that timed out: failed and refunded.
    if (patched('orphaned-jobs')) await failJobsWhoseWorkflowClosed();
    return released;
  }
  await restartStaleGenerations();
  return releaseExpiredHolds();
}
