import { createContext, type CoreDeps } from '../core/context.ts';
import type { JobError, StoredOutput } from '../core/generations/job-row.ts';
import { createInternalCaller } from '../core/internal/router.ts';

/**
 * Activities call core's internal steps through its internal router, as the internal caller.
 * Built by a factory so the worker passes real dependencies and tests pass their own. Each may
 * run more than once: the core steps behind them are idempotent on the job id.
 */
export function createActivities(deps: CoreDeps) {
  const core = () => createInternalCaller(createContext(deps, { kind: 'internal' }));
  return {
    async releaseExpiredHolds(): Promise<number> {
      return (await core().holds.releaseExpired()).released;
    },
    async restartStaleGenerations(): Promise<number> {
      return (await core().jobs.restartStale()).started;
    },
    async refreshAnalytics(): Promise<number> {
      const done = await core().analytics.refresh();
      return done.usage_days + done.job_days;
    },
    beginGeneration: (id: string) => core().jobs.begin({ id }),
    submitGeneration: (id: string) => core().jobs.submit({ id }),
    pollGeneration: (provider: string, handle: string) => core().jobs.poll({ provider, handle }),
    storeGenerationResult: (id: string, provider: string, handle: string): Promise<StoredOutput> => core().jobs.store({ id, provider, handle }),
    completeGeneration: (id: string, output: StoredOutput) => core().jobs.complete({ id, output }),
    failGeneration: (id: string, error: JobError) => core().jobs.fail({ id, error }),
    cancelUpstreamGeneration: (provider: string, handle: string) => core().jobs.cancelUpstream({ provider, handle }),
    deliverGenerationWebhook: (id: string) => core().jobs.deliverWebhook({ id }),
    deleteGenerationResult: (id: string) => core().jobs.deleteResult({ id }),
  };
}

export type Activities = ReturnType<typeof createActivities>;
