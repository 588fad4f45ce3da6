import { Context } from '@temporalio/activity';
import { createContext, type CoreDeps } from '../core/context.ts';
import type { JobError, StoredOutput } from '../core/generations/job-row.ts';
import { createInternalCaller } from '../core/internal/router.ts';

/**
 * Activities call core's internal steps through its internal router, as the internal caller.
 * Built by a factory so the worker passes real dependencies and tests pass their own. Each may
 * run more than once: the core steps behind them are idempotent on the job id. Their names are
 * what an operator reads in a workflow's history in the Temporal UI: each says what it does.
 */
export function createActivities(deps: CoreDeps) {
  const core = () => createInternalCaller(createContext(deps, { kind: 'internal' }));
  const steps = {
    // The schedules' steps heartbeat: a run whose worker died is retried elsewhere within
    // seconds, not held open (and every later run skipped) until its start-to-close timeout.
    // The hold-sweep schedule.
    releaseExpiredHolds: (): Promise<number> => heartbeating(async () => (await core().holds.releaseExpired()).released),
    restartStaleGenerations: (): Promise<number> => heartbeating(async () => (await core().jobs.restartStale()).started),
    failJobsWhoseWorkflowClosed: (): Promise<number> => heartbeating(async () => (await core().jobs.endOrphaned()).ended),
    // The result-retention schedule.
    deleteExpiredResults: (): Promise<number> => heartbeating(async () => (await core().jobs.deleteExpiredResults()).deleted),
    // The analytics schedule.
    refreshAnalytics: (): Promise<number> =>
      heartbeating(async () => {
        const done = await core().analytics.refresh();
        return done.usage_days + done.job_days;
      }),
    // The payments-reconcile schedule.
    creditPaymentsTheWebhookMissed: (): Promise<number> => heartbeating(async () => (await core().payments.reconcile()).credited.length),
    // An account's auto top-up workflow.
    chargeSavedCardForAutoTopUp: (accountId: string, chargeId: string): Promise<string> => core().payments.autoTopUp({ account: accountId, charge: chargeId }),
    // A job's workflow, in order.
    markJobRunning: (id: string) => core().jobs.begin({ id }),
    submitJobToProvider: (id: string) => core().jobs.submit({ id }),
    askProviderForJobState: (provider: string, handle: string) => core().jobs.poll({ provider, handle }),
    copyResultToStorage: (id: string, provider: string, handle: string): Promise<StoredOutput> => heartbeating(() => core().jobs.store({ id, provider, handle })),
    chargeAndCompleteJob: (id: string, output: StoredOutput) => core().jobs.complete({ id, output }),
    refundAndFailJob: (id: string, error: JobError) => core().jobs.fail({ id, error }),
    refundAndCancelJob: (id: string) => core().jobs.cancel({ id }),
    cancelJobAtProvider: (provider: string, handle: string) => core().jobs.cancelUpstream({ provider, handle }),
    deliverJobWebhook: (id: string) => core().jobs.deliverWebhook({ id }),
  };
  return {
    ...steps,
    // The names workflows started before version 2 recorded in their histories: they replay and
    // finish on them (workflows/generation-v1.workflow.ts). Remove with that file.
    beginGeneration: steps.markJobRunning,
    submitGeneration: steps.submitJobToProvider,
    pollGeneration: steps.askProviderForJobState,
    storeGenerationResult: steps.copyResultToStorage,
    completeGeneration: steps.chargeAndCompleteJob,
    failGeneration: steps.refundAndFailJob,
    cancelUpstreamGeneration: steps.cancelJobAtProvider,
    deliverGenerationWebhook: steps.deliverJobWebhook,
    deleteGenerationResult: (id: string) => core().jobs.deleteResult({ id }),
  };
}

export type Activities = ReturnType<typeof createActivities>;

/**
 * Runs a long activity while telling Temporal every few seconds that its worker is alive, so
 * that a worker killed mid-step is noticed after the heartbeat timeout (the workflow's
 * `transfer` options), not after the whole start-to-close timeout. Outside an activity (a test
 * calling the step directly) it just runs.
 */
async function heartbeating<T>(work: () => Promise<T>): Promise<T> {
  let ctx: Context;
  try {
    ctx = Context.current();
  } catch {
    return work();
  }
  const timer = setInterval(() => ctx.heartbeat(), 2_000);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}
