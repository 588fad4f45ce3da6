import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ParentClosePolicy,
  TimeoutFailure,
  isCancellation,
  patched,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  startChild,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { JobEnding } from '../core/generations/end-job.ts';
import type { JobError } from '../core/generations/job-row.ts';
import type { Activities } from './activities.ts';
import { generationWorkflowV1, type GenerationWorkflowOptions } from './generation-v1.workflow.ts';
import { SEARCH_ATTRIBUTES, type RouteFailure } from './shared.ts';
import { webhookDeliveryWorkflow } from './webhook.workflow.ts';

// Short start-to-close timeouts: when a worker dies mid-step, Temporal retries the step on
// another worker once the timeout passes.
const retry = { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 8 };
/**
 * The short steps (database, provider submit and poll) run as local activities: by the worker
 * that runs the workflow, recorded as markers, with no activity task going through the server.
 */
const steps = proxyLocalActivities<Activities>({ startToCloseTimeout: '30 seconds', retry });
/** Money and state: retried without limit (they are idempotent), so a hold always ends. */
const ledger = proxyLocalActivities<Activities>({
  startToCloseTimeout: '15 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
});
/**
 * Copying the result into our storage may move a large file: a regular activity. It heartbeats
 * (workflows/activities.ts), so a worker that dies mid-copy is noticed within the heartbeat
 * timeout and the copy retried elsewhere, rather than after the 5 minutes a copy may take.
 */
const transferOptions = { startToCloseTimeout: '5 minutes', heartbeatTimeout: '10 seconds', retry } as const;
const transfer = proxyActivities<Activities>(transferOptions);
/**
 * Since version 5 (`patched('one-workflow-task')`), the copy is a local activity too: a job is then
 * one workflow task from start to end (a poll that finds the job still going upstream waits on a
 * durable timer, which ends that task, as before), rather than three round trips through the
 * Temporal server more (the activity's task, and the workflow task its result wakes). A worker that
 * dies mid-copy is noticed when the workflow task it was running times out (10 s, the heartbeat
 * timeout the regular activity had) and the copy runs again on another worker; a copy longer than
 * that keeps its workflow task alive (the SDK heartbeats it). Its 5 minutes are start-to-close.
 */
const localTransferOptions = { startToCloseTimeout: '5 minutes', retry } as const;
const localTransfer = proxyLocalActivities<Activities>(localTransferOptions);

/**
 * One media job, its workflow id the job id. The job's reservation was made when it was
 * accepted; this workflow ends it exactly once: charged when the result is stored, refunded in
 * full on any failure or when the model's deadline passes. Waiting uses durable timers, so a
 * worker that dies mid-job is replaced by another that carries on.
 *
 * The workflow's life is the job's (docs/operations.md): it closes as the job ends, Completed
 * for succeeded, Failed with the job's error for failed, Canceled for canceled, so the Temporal
 * UI and the API agree. Its search attribute MasJobStatus follows the job. The result's
 * retention is a schedule's business (workflows/result-retention.workflow.ts), and a webhook is
 * delivered by a workflow of its own, so that nothing keeps this one open after the job ended.
 */
export async function generationWorkflow(jobId: string, options: GenerationWorkflowOptions = {}): Promise<string> {
  // Version 5: the three patches below are all in force, and the copy is a local step (one
  // marker in place of three, and one workflow task per job). Runs started before replay as they
  // were recorded: their histories hold no such marker.
  const oneTask = patched('one-workflow-task');
  // Runs started before version 2 replay and finish in their own shape.
  if (!oneTask && !patched('closes-with-job')) return generationWorkflowV1(jobId, options);
  // Runs started before routes replay on the model's one provider, as they were recorded.
  const routed = oneTask || patched('routes');
  // Runs started before the deadline bounded every step replay with their steps unbounded (only the polls were).
  const bounded = oneTask || (routed && patched('deadline-in-steps'));

  let begun: Awaited<ReturnType<Activities['markJobRunning']>>;
  try {
    begun = await ledger.markJobRunning(jobId);
  } catch (err) {
    // Canceled before it began (a cancel request from the UI while the job was queued).
    if (!isCancellation(err)) throw err;
    return closeAs(await CancellationScope.nonCancellable(() => ledger.refundAndCancelJob(jobId)));
  }
  if (begun.ended) return closeAs(begun);
  jobStatus('running');
  let ending: JobEnding;
  const upstream: Upstream = {};
  try {
    if (begun.missingModel) throw ApplicationFailure.nonRetryable('The model no longer exists.', 'model_not_found');
    const deadline = { at: Date.now() + begun.deadlineSeconds * 1000, seconds: begun.deadlineSeconds };
    // The steps' first retry wait: the workflow's own, or the one the service was wired with (tests), as the first step recorded it.
    const stepRetry = 'stepRetryInitialMs' in begun && begun.stepRetryInitialMs !== undefined ? { ...retry, initialInterval: begun.stepRetryInitialMs } : retry;
    const output = routed ? await runOnRoutes(jobId, begun.routes, deadline, bounded, stepRetry, oneTask) : await runOnProvider(jobId, deadline, upstream);
    ending = await ledger.chargeAndCompleteJob(jobId, output);
  } catch (err) {
    if (routed) {
      // Canceled, or failed with work possibly still going upstream (the deadline passed, a
      // poll kept failing): ask the provider to stop, from the handle on the job's row. Once per
      // handle, whoever asks first (the API's cancel may have); never fails.
      if (!upstreamEnded(err)) await CancellationScope.nonCancellable(() => steps.cancelJobAtProviderOnce(jobId)).catch(() => undefined);
    } else if (isCancellation(err)) {
      // Canceled through the API: the job is already canceled and refunded; stop the upstream too.
      const submitted = upstream.submitted;
      if (submitted) await CancellationScope.nonCancellable(() => steps.cancelJobAtProvider(submitted.provider, submitted.handle)).catch(() => undefined);
    }
    // A cancel request ends the job canceled and refunded: already done when it came through the
    // API, done here when an operator sent it from the Temporal UI. Each is a no-op on a job
    // that already ended, and answers how it really ended.
    const cancel = isCancellation(err);
    ending = await CancellationScope.nonCancellable(() => (cancel ? ledger.refundAndCancelJob(jobId) : ledger.refundAndFailJob(jobId, jobError(err))));
  }
  if (begun.webhook) await startWebhookDelivery(jobId);
  return closeAs(ending);
}

type Upstream = { submitted?: { provider: string; handle: string } };
type Deadline = { at: number; seconds: number };

/**
 * How long after the deadline the result's copy may still run: the result is made (and paid for
 * upstream), and for a synchronous upstream the copy is where it is made. One copy attempt's own
 * limit, well inside the 15 minutes a job's hold outlives its deadline (core/generations/create-generation.ts).
 */
const COPY_GRACE_MS = 5 * 60_000;
type StoredOutput = Awaited<ReturnType<Activities['copyResultToStorage']>>;

/**
 * The job on each of the model's routes in turn (docs/providers.md, "Media routes"), in the
 * order its first step drew: each route's submit, polls and copy are activities of their own,
 * their summary naming the route, so the history shows every fallback. A route that fails for
 * a reason of its own (unreachable, time-out, 5xx, 429, its breaker open, the provider failing
 * the job) hands the job to the next, after its upstream work is stopped; a refusal on the
 * request's merits, or the deadline (which covers every route), fails the job at once. Routes
 * with a next one get 3 attempts per step, the last route the full 8.
 *
 * `bounded` (every run since the deadline bounded the steps): no step, nor any of its retries,
 * starts after the deadline (the result's copy: after the deadline and its grace). Each step's
 * retries end there (its schedule-to-close timeout), and the step is told when that is, so that an
 * upstream asking to be called back later (a 429's Retry-After) fails the route at once instead
 * of holding the job past its deadline: the next route takes it, or the job fails.
 */
async function runOnRoutes(
  jobId: string,
  routes: string[],
  deadline: Deadline,
  bounded: boolean,
  stepRetry: typeof retry | (Omit<typeof retry, 'initialInterval'> & { initialInterval: number }),
  localCopy: boolean,
): Promise<StoredOutput> {
  if (routes.length === 0) throw ApplicationFailure.nonRetryable('The model no longer exists.', 'model_not_found');
  const copyUntil = deadline.at + COPY_GRACE_MS;
  /** A step's options and its trailing `until`, when bounded: the time left until `end`, or the deadline's failure when none is. */
  const within = (end: number): { options: { scheduleToCloseTimeout?: number }; until: [] | [number] } =>
    bounded ? { options: { scheduleToCloseTimeout: timeLeft(end, deadline) }, until: [end] } : { options: {}, until: [] };
  for (let i = 0; ; i++) {
    const route = routes[i]!;
    const fallback = i < routes.length - 1;
    const on = (step: string) => `${step} on route ${i + 1} of ${routes.length}: ${route}`;
    const short = { startToCloseTimeout: '30 seconds', retry: fallback ? { ...stepRetry, maximumAttempts: 3 } : stepRetry } as const;
    if (i > 0 && Date.now() >= deadline.at) throw deadlineExceeded(deadline);
    try {
      const submit = within(deadline.at);
      const { provider, handle } = await steps.submitJobToProvider.executeWithOptions({ ...short, ...submit.options, summary: on('submit') }, [jobId, { route, fallback }, ...submit.until]);
      await waitForProvider(provider, handle, deadline, (p, h) => {
        const poll = within(deadline.at);
        return steps.askProviderForJobState.executeWithOptions({ ...short, ...poll.options, summary: on('poll') }, bounded ? [p, h, deadline.at, jobId] : [p, h]);
      });
      const copy = within(copyUntil);
      const args = [jobId, provider, handle, ...copy.until] as [string, string, string, number?];
      if (localCopy) return await localTransfer.copyResultToStorage.executeWithOptions({ ...localTransferOptions, retry: short.retry, ...copy.options, summary: on('copy the result') }, args);
      return await transfer.copyResultToStorage.executeWithOptions({ ...transferOptions, retry: short.retry, ...copy.options, summary: on('copy the result') }, args);
    } catch (caught) {
      // A step whose retries ran into the deadline (its schedule-to-close timeout) is the deadline's failure.
      const err = bounded && outOfTime(caught) ? deadlineExceeded(deadline) : caught;
      if (!fallback || !fallsBack(err)) throw err;
      // The next route starts afresh: stop whatever this one may still be doing (and billing).
      if (!upstreamEnded(err)) await steps.cancelJobAtProviderOnce(jobId).catch(() => undefined);
    }
  }
}

/** The milliseconds left until `end` (workflow time); none left is the deadline's failure, before any step starts. */
function timeLeft(end: number, deadline: Deadline): number {
  const left = end - Date.now();
  if (left <= 0) throw deadlineExceeded(deadline);
  return left;
}

/** A step that ran out of its schedule-to-close time: the deadline passed during it or its retries. */
const outOfTime = (err: unknown): boolean =>
  err instanceof ActivityFailure && err.cause instanceof TimeoutFailure && err.cause.timeoutType === 'SCHEDULE_TO_CLOSE';

/** The job on the model's one provider, as workflows started before routes ran it (their histories replay on it). */
async function runOnProvider(jobId: string, deadline: Deadline, upstream: Upstream): Promise<StoredOutput> {
  upstream.submitted = await steps.submitJobToProvider(jobId);
  const { provider, handle } = upstream.submitted;
  await waitForProvider(provider, handle, deadline, (p, h) => steps.askProviderForJobState(p, h));
  return transfer.copyResultToStorage(jobId, provider, handle);
}

/** Polls the upstream, on durable timers from 250 ms doubling to 10 s, until the job is done there, failed, or past the deadline. */
async function waitForProvider(
  provider: string,
  handle: string,
  deadline: Deadline,
  poll: (provider: string, handle: string) => ReturnType<Activities['askProviderForJobState']>,
): Promise<void> {
  let wait = 250;
  for (;;) {
    const state = await poll(provider, handle);
    if (state.status === 'succeeded') return;
    if (state.status === 'failed') {
      const details: RouteFailure[] = [{ onMerits: 'onMerits' in state && state.onMerits === true, upstreamEnded: true }];
      throw ApplicationFailure.create({ message: state.message, type: state.code ?? 'provider_failed', nonRetryable: true, details });
    }
    if (Date.now() + wait > deadline.at) throw deadlineExceeded(deadline);
    await sleep(wait);
    wait = Math.min(wait * 2, 10_000);
  }
}

const deadlineExceeded = (deadline: Deadline) =>
  ApplicationFailure.nonRetryable(`The job did not finish within the model's deadline of ${deadline.seconds} s.`, 'deadline_exceeded');

/** The upstream said the job failed there (a poll's answer): nothing to stop. */
const upstreamEnded = (err: unknown): boolean => err instanceof ApplicationFailure && (err.details?.[0] as RouteFailure | undefined)?.upstreamEnded === true;

/** Whether a route's failure lets the next route try: not a cancel, the deadline, a refusal on the request's merits, or a job already over. */
function fallsBack(err: unknown): boolean {
  if (isCancellation(err)) return false;
  const failure = err instanceof ActivityFailure ? err.cause : err;
  if (!(failure instanceof ApplicationFailure)) return true;
  if (failure.type === 'deadline_exceeded') return false;
  const details = failure.details?.[0] as RouteFailure | undefined;
  return details?.onMerits !== true && details?.jobOver !== true;
}

/** The job ended: its status on the workflow, then the workflow closes the way the job ended. */
async function closeAs(ending: JobEnding): Promise<string> {
  jobStatus(ending.status);
  if (ending.status === 'succeeded') return 'succeeded';
  if (ending.status === 'failed') {
    const error: JobError = ending.error ?? { message: 'The job failed.', code: 'job_failed' };
    throw ApplicationFailure.create({ message: error.message, type: error.code, nonRetryable: true });
  }
  // Canceled through the API, which asks Temporal to cancel this workflow right after the job's
  // row changed: closing on that request makes the workflow Canceled. Should the request be
  // lost, the workflow fails after a minute rather than stay open.
  await Promise.race([CancellationScope.current().cancelRequested, sleep('1 minute')]);
  throw ApplicationFailure.create({ message: 'The job was canceled.', type: 'canceled', nonRetryable: true });
}

function jobStatus(status: string): void {
  upsertSearchAttributes([{ key: SEARCH_ATTRIBUTES.jobStatus, value: status }]);
}

/**
 * The webhook is delivered by a child workflow that outlives this one (ABANDON): retried for
 * about 17 minutes if the receiver fails, visible in the UI as `<job id>-webhook`.
 */
async function startWebhookDelivery(jobId: string): Promise<void> {
  await CancellationScope.nonCancellable(() =>
    startChild(webhookDeliveryWorkflow, {
      workflowId: `${jobId}-webhook`,
      args: [jobId],
      parentClosePolicy: ParentClosePolicy.ABANDON,
      staticSummary: `Webhook of job ${jobId}`,
    }),
  ).catch(() => undefined);
}

/** The workflow's own failures (their words are the workflow's). */
const WORKFLOW_CODES = new Set(['model_not_found', 'deadline_exceeded']);

/**
 * The job's error, as its owner sees it: only words this service wrote. That is a provider step's
 * failure in our words (a MediaProviderError, made a failure with its RouteFailure details by
 * workflows/activities.ts, or a poll's answer that the job failed), or the workflow's own. Anything
 * else is an internal error: its type a class name (`TRPCError`, `Error`), its message whatever
 * the error said, the upstream's own text among it. That stays in the step's failure in the
 * workflow's history and in the service log, and the customer reads a generic failure. A local
 * step's failure reaches the workflow as it was thrown, not wrapped in an ActivityFailure.
 */
function jobError(err: unknown): JobError {
  const failure = err instanceof ActivityFailure ? err.cause : err;
  if (failure instanceof ApplicationFailure && /^[a-z][a-z0-9_]*$/.test(failure.type ?? '')) {
    const ours = WORKFLOW_CODES.has(failure.type!) || typeof (failure.details?.[0] as RouteFailure | undefined)?.onMerits === 'boolean';
    if (ours) return { message: failure.message, code: failure.type! };
  }
  return { message: 'The job failed: a step kept failing after every retry. It was refunded in full.', code: 'job_failed' };
}
