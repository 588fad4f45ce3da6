import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { createContext, type CoreDeps } from '../core/context.ts';
import type { JobError, StoredOutput } from '../core/generations/job-row.ts';
import type { RouteTry } from '../core/generations/job-steps.ts';
import { jobIsOver, refusedOnMerits } from '../core/generations/upstream.ts';
import { createInternalCaller } from '../core/internal/router.ts';
import { MediaProviderError } from '../core/ports.ts';
import type { RouteFailure } from './shared.ts';
import { annotate } from '../core/telemetry.ts';

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
        return done.usage_days + done.job_days + done.route_days;
      }),
    // The payments-reconcile schedule.
    creditPaymentsTheWebhookMissed: (): Promise<number> => heartbeating(async () => (await core().payments.reconcile()).credited.length),
    // The low-balance schedule.
    mailLowBalanceNotices: (): Promise<number> => heartbeating(async () => (await core().notices.lowBalance()).notified),
    // An account's auto top-up workflow.
    chargeSavedCardForAutoTopUp: (accountId: string, chargeId: string): Promise<string> => core().payments.autoTopUp({ account: accountId, charge: chargeId }),
    // A job's workflow, in order.
    markJobRunning: (id: string) => (jobSpan(id), core().jobs.begin({ id })),
    // With a route (`provider/model`), one route's try: the history shows which route each submit went to.
    // `until` (epoch ms): when the job's time is up; an upstream asking to be called back later than that is not waited for.
    submitJobToProvider: (id: string, route?: RouteTry, until?: number) =>
      (jobSpan(id), providerStep(core().jobs.submit({ id, ...(route ? { route } : {}) }), until)),
    // With the job's id, a job that is over is not asked about (the step fails, not retried).
    askProviderForJobState: (provider: string, handle: string, until?: number, id?: string) =>
      providerStep(core().jobs.poll({ provider, handle, ...(id !== undefined ? { id } : {}) }), until),
    copyResultToStorage: (id: string, provider: string, handle: string, until?: number): Promise<StoredOutput> =>
      (jobSpan(id), providerStep(heartbeating(() => core().jobs.store({ id, provider, handle })), until)),
    chargeAndCompleteJob: (id: string, output: StoredOutput) => (jobSpan(id), core().jobs.complete({ id, output })),
    refundAndFailJob: (id: string, error: JobError) => (jobSpan(id), core().jobs.fail({ id, error })),
    refundAndCancelJob: (id: string) => (jobSpan(id), core().jobs.cancel({ id })),
    cancelJobAtProvider: (provider: string, handle: string) => core().jobs.cancelUpstream({ provider, handle }),
    // From the handle on the job's row, once per handle (the API or the sweep may have asked already); never throws.
    cancelJobAtProviderOnce: (id: string): Promise<boolean> => core().jobs.cancelUpstreamOf({ id }),
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

/** Tracing on: the activity's span (the Temporal interceptor's) names the job it works on. */
function jobSpan(id: string): void {
  annotate(() => ({ 'mas.job_id': id }));
}

export type Activities = ReturnType<typeof createActivities>;

/**
 * A provider's failure as Temporal should treat it (core/ports.ts, MediaProviderError): a
 * refusal fails the step at once, not retried; anything else is retried, after the upstream's
 * Retry-After when it named one. Either way its type is our snake_case code and its message our
 * words, which the workflow makes the job's error once the step has failed for good. Its details
 * say whether it was a refusal on the request's merits, which no other route would change.
 *
 * A Retry-After that ends at or past `until` (the job's deadline, as the workflow passes it) is
 * not waited for: the step fails at once, not retried, so that the workflow moves the job to its
 * next route, or fails it, while there is time, rather than keep it waiting past its deadline.
 */
async function providerStep<T>(step: Promise<T>, until?: number): Promise<T> {
  try {
    return await step;
  } catch (err) {
    let cause: unknown = err;
    while (cause instanceof Error && !(cause instanceof MediaProviderError)) cause = cause.cause;
    if (!(cause instanceof MediaProviderError)) throw err;
    const retryAfter = cause.retryAfterMs;
    const pastDeadline = cause.kind === 'retryable' && retryAfter !== undefined && until !== undefined && Date.now() + retryAfter >= until;
    throw ApplicationFailure.create({
      message: cause.message,
      type: cause.code,
      nonRetryable: cause.kind === 'refused' || pastDeadline,
      // Whether the model's next route may take the job (workflows/shared.ts, RouteFailure).
      details: [{ onMerits: refusedOnMerits(cause.code), ...(jobIsOver(cause.code) ? { jobOver: true } : {}) } satisfies RouteFailure],
      ...(retryAfter !== undefined && !pastDeadline ? { nextRetryDelay: retryAfter } : {}),
    });
  }
}

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
  // A local activity (the copy since version 5 of the job workflow) has no heartbeat: its workflow task is kept alive instead.
  if (ctx.info.isLocal) return work();
  const timer = setInterval(() => ctx.heartbeat(), 2_000);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}
