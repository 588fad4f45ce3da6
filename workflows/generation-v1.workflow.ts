import { ActivityFailure, ApplicationFailure, CancellationScope, isCancellation, patched, proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';
import type { Activities } from './activities.ts';

// Short start-to-close timeouts: when a worker dies mid-activity, Temporal retries the activity
// on another worker once the timeout passes.
const retry = { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 8 };
/** Calls to the provider: retried with backoff, then the job fails. */
const steps = proxyActivities<Activities>({ startToCloseTimeout: '30 seconds', retry });
/** Copying the result into our storage may move a large file. */
const transfer = proxyActivities<Activities>({ startToCloseTimeout: '5 minutes', retry });
/** Money and state: retried without limit (they are idempotent), so a hold always ends. */
const ledger = proxyActivities<Activities>({
  startToCloseTimeout: '15 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

/**
 * The same steps as local activities: run by the worker that runs the workflow, recorded as
 * markers in its next workflow task, with no activity task going through the server. Used for
 * the short steps (database, provider submit and poll), which made most of a job's round trips
 * to Temporal; the result transfer, which can move a large file, stays a regular activity.
 */
const localSteps = proxyLocalActivities<Activities>({ startToCloseTimeout: '30 seconds', retry });
const localLedger = proxyLocalActivities<Activities>({
  startToCloseTimeout: '15 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});

/** Webhook delivery: retried with backoff (1 s doubling to 10 min, 10 attempts, about 17 minutes). */
const notify = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 minutes', maximumAttempts: 10 },
});

async function notifyEnd(jobId: string, hasWebhook: boolean): Promise<void> {
  if (!hasWebhook) return;
  await CancellationScope.nonCancellable(() => notify.deliverGenerationWebhook(jobId)).catch(() => undefined);
}

export interface GenerationWorkflowOptions {
  /** How long the stored result is kept after the job succeeded (version 1 only). */
  retentionSeconds?: number;
}

/**
 * The generation workflow as it was before version 2 (generation.workflow.ts), frozen: runs
 * started by an older deployment replay and finish on it, the job's result kept on a timer
 * through its retention and then deleted. Not a workflow type of its own: generationWorkflow
 * calls it for those runs. Delete this file (and the activities' old names) once no run of the
 * old shape remains: the longest model deadline plus RESULT_RETENTION_SECONDS after the deploy.
 * Its histories stay in test/fixtures/histories; their replay test goes with it.
 */
export async function generationWorkflowV1(jobId: string, options: GenerationWorkflowOptions = {}): Promise<string> {
  // Runs started before local steps existed replay on regular activities, as they were recorded.
  const local = patched('local-steps');
  const stepsNow = local ? localSteps : steps;
  const ledgerNow = local ? localLedger : ledger;
  const job = await ledgerNow.beginGeneration(jobId);
  if (job.ended) return 'already-ended';
  // Older runs did not know whether the job had a webhook: they always asked the activity.
  const hasWebhook = local ? job.webhook === true : true;
  let submitted: { provider: string; handle: string } | undefined;
  try {
    if (job.missingModel) throw ApplicationFailure.nonRetryable('The model no longer exists.', 'model_not_found');
    const deadline = Date.now() + job.deadlineSeconds * 1000;
    submitted = await stepsNow.submitGeneration(jobId);
    const { provider, handle } = submitted;
    let wait = 250;
    for (;;) {
      const state = await stepsNow.pollGeneration(provider, handle);
      if (state.status === 'succeeded') break;
      if (state.status === 'failed') throw ApplicationFailure.nonRetryable(state.message, state.code ?? 'provider_failed');
      if (Date.now() + wait > deadline) {
        throw ApplicationFailure.nonRetryable(`The job did not finish within the model's deadline of ${job.deadlineSeconds} s.`, 'deadline_exceeded');
      }
      await sleep(wait);
      wait = Math.min(wait * 2, 10_000);
    }
    const output = await transfer.storeGenerationResult(jobId, provider, handle);
    const done = await ledgerNow.completeGeneration(jobId, output);
    if (done.status !== 'succeeded') {
      await notifyEnd(jobId, hasWebhook);
      return done.status;
    }
  } catch (err) {
    if (isCancellation(err)) {
      // Canceled through the API: the job is already canceled and refunded; stop the upstream too.
      const upstream = submitted;
      if (upstream) await CancellationScope.nonCancellable(() => stepsNow.cancelUpstreamGeneration(upstream.provider, upstream.handle)).catch(() => undefined);
      await CancellationScope.nonCancellable(() => ledgerNow.failGeneration(jobId, { message: 'The job was canceled.', code: 'canceled' }));
      await notifyEnd(jobId, hasWebhook);
      return 'canceled';
    }
    await CancellationScope.nonCancellable(() => ledgerNow.failGeneration(jobId, jobError(err)));
    await notifyEnd(jobId, hasWebhook);
    return 'failed';
  }
  await notifyEnd(jobId, hasWebhook);
  // Keep the result for its retention period on a durable timer, then delete it.
  await sleep((options.retentionSeconds ?? 3600) * 1000);
  await steps.deleteGenerationResult(jobId);
  return 'succeeded';
}

/**
 * Only a failure with a snake_case code is in our words; an internal error (its type a class name
 * such as `TRPCError`, its message whatever it said, an upstream's text among it) is a generic
 * failure. Changing what the job records changes no command: the runs still replay.
 */
function jobError(err: unknown): { message: string; code: string } {
  const cause = err instanceof ActivityFailure && err.cause ? err.cause : err;
  if (cause instanceof ApplicationFailure && /^[a-z][a-z0-9_]*$/.test(cause.type ?? '')) return { message: cause.message, code: cause.type! };
  return { message: 'The job failed.', code: 'job_failed' };
}
