import { z } from 'zod';
import { sendLowBalanceNotices } from '../accounts/low-balance.ts';
import { refreshAnalytics } from '../admin/analytics/refresh.ts';
import { cancelJob, completeJob, failJob } from '../generations/end-job.ts';
import { beginJob, cancelUpstream, deleteJobResult, pollJob, restartStaleJobs, storeJobResult, submitJob } from '../generations/job-steps.ts';
import { endOrphanedJobs } from '../generations/orphans.ts';
import { assertJobMayCallUpstream, cancelJobUpstream, recordUpstreamCost, refusedOnMerits } from '../generations/upstream.ts';
import { deleteExpiredResults } from '../generations/retention.ts';
import { sweep } from '../money/sweep.ts';
import { runAutoTopUp, startAutoTopUpIfLow } from '../payments/auto-top-up.ts';
import { reconcilePayments } from '../payments/reconcile.ts';
import { createCallerFactory, internalProcedure, router } from '../trpc.ts';
import { deliverJobWebhook } from '../webhooks/webhooks.ts';

const jobId = z.object({ id: z.string() });
const upstream = z.object({ provider: z.string(), handle: z.string() });
const storedOutput = z.object({ key: z.string(), mime_type: z.string(), bytes: z.number(), filename: z.string() });

/**
 * The service's own steps: what the workflows' activities and the sweep schedule call. Only
 * in-process callers reach them (`internalProcedure`), and only workflows/activities.ts
 * imports this file: ESLint forbids it to adapters/, so no network adapter can expose a step.
 */
export const internalRouter = router({
  jobs: router({
    begin: internalProcedure.input(jobId).mutation(({ ctx, input }) => beginJob(ctx.deps, ctx.em, input.id)),
    /** Hands the job to a route's provider (the model's first when no route is named: workflows from before routes). */
    submit: internalProcedure
      .input(jobId.extend({ route: z.object({ route: z.string(), fallback: z.boolean() }).optional() }))
      .mutation(({ ctx, input }) => submitJob(ctx.deps, ctx.em, input.id, input.route)),
    /**
     * The upstream's state; a failure says whether it was a refusal on the request's merits (no
     * other route is tried then). With the job's id, a job that is over (ended, or its hold
     * released) is not asked about: the step fails instead (workflows since the deadline bounded the steps).
     */
    poll: internalProcedure.input(upstream.extend({ id: z.string().optional() })).query(async ({ ctx, input }) => {
      if (input.id !== undefined) await assertJobMayCallUpstream(ctx.em, input.id);
      const state = await pollJob(ctx.deps, input.provider, input.handle);
      return state.status === 'failed' ? { ...state, onMerits: refusedOnMerits(state.code) } : state;
    }),
    store: internalProcedure.input(upstream.extend(jobId.shape)).mutation(({ ctx, input }) => storeJobResult(ctx.deps, ctx.em, input.id, input.provider, input.handle)),
    complete: internalProcedure.input(jobId.extend({ output: storedOutput })).mutation(async ({ ctx, input }) => {
      const ending = await completeJob(ctx.deps, ctx.em, input.id, input.output);
      if (ending.status === 'succeeded') await recordUpstreamCost(ctx.deps, ctx.em, input.id);
      // A settle that leaves the purchased coins under the auto top-up threshold starts one.
      if (ending.status === 'succeeded') {
        const [job] = await ctx.em.execute<{ account_id: string }[]>('select account_id from generations where id = ?', [input.id]);
        if (job) await startAutoTopUpIfLow(ctx.deps, job.account_id);
      }
      return ending;
    }),
    fail: internalProcedure
      .input(jobId.extend({ error: z.object({ message: z.string(), code: z.string() }) }))
      .mutation(({ ctx, input }) => failJob(ctx.em, input.id, input.error)),
    /** Cancels and refunds the job: its workflow was asked to cancel (the API did it already, or an operator in the Temporal UI). */
    cancel: internalProcedure.input(jobId).mutation(async ({ ctx, input }) => (await cancelJob(ctx.em, input.id)).ending),
    cancelUpstream: internalProcedure.input(upstream).mutation(({ ctx, input }) => cancelUpstream(ctx.deps, input.provider, input.handle)),
    /** Asks the provider to stop the job's upstream work, from the handle on its row; once per handle, best effort. */
    cancelUpstreamOf: internalProcedure.input(jobId).mutation(({ ctx, input }) => cancelJobUpstream(ctx.deps, ctx.em, input.id)),
    deliverWebhook: internalProcedure.input(jobId).mutation(({ ctx, input }) => deliverJobWebhook(ctx.deps, ctx.em, input.id)),
    deleteResult: internalProcedure.input(jobId).mutation(({ ctx, input }) => deleteJobResult(ctx.deps, ctx.em, input.id)),
    /** Starts the workflow of jobs left queued (a crash between accepting a job and starting it). */
    restartStale: internalProcedure.mutation(({ ctx }) => restartStaleJobs(ctx.deps, ctx.em)),
    /** Fails and refunds jobs whose workflow closed without ending them (terminated, timed out, gone). */
    endOrphaned: internalProcedure.mutation(({ ctx }) => endOrphanedJobs(ctx.deps, ctx.em)),
    /** Deletes the stored results past their retention; run by the result-retention Schedule. */
    deleteExpiredResults: internalProcedure.mutation(({ ctx }) => deleteExpiredResults(ctx.deps, ctx.em)),
  }),

  holds: router({
    /** Releases reservations past their expiry; run by the hold-sweep Temporal Schedule. */
    releaseExpired: internalProcedure.mutation(({ ctx }) => sweep(ctx.deps, ctx.em)),
  }),
  /** Credits the paid sessions and invoices of the last 3 days the webhook missed; run by the mas-payments-reconcile Schedule. */
  payments: router({
    reconcile: internalProcedure.mutation(({ ctx }) => reconcilePayments(ctx.deps, ctx.em)),
    /** The auto top-up workflow's step: charges the account's saved card once under `charge`. */
    autoTopUp: internalProcedure.input(z.object({ account: z.string(), charge: z.string() })).mutation(({ ctx, input }) => runAutoTopUp(ctx.deps, ctx.em, input.account, input.charge)),
  }),
  /** Mails each account whose balance fell below its notice's threshold, once per crossing; run by the mas-low-balance Schedule. */
  notices: router({ lowBalance: internalProcedure.mutation(({ ctx }) => sendLowBalanceNotices(ctx.deps, ctx.em)) }),
  /** Rebuilds the usage analytics' daily rollups for the days that changed; run by the mas-analytics-refresh Schedule. */
  analytics: router({ refresh: internalProcedure.mutation(({ ctx }) => refreshAnalytics(ctx.em)) }),
});

export const createInternalCaller = createCallerFactory(internalRouter);
