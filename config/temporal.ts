import { createRequire } from 'node:module';
import { tracingOn } from '../core/telemetry.ts';
import { Client, Connection, ScheduleAlreadyRunning, ScheduleOverlapPolicy, WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import proto from '@temporalio/proto';
import type { Logger } from 'pino';
import { startEmbeddedTemporal } from '../adapters/embedded/temporal.ts';
import { formatCoins } from '../core/money/coins.ts';
import type { AutoTopUpStarter, GenerationStarter, JobWorkflowStart } from '../core/ports.ts';
import {
  ANALYTICS_REFRESH_SCHEDULE_ID,
  AUTO_TOP_UP_WORKFLOW,
  autoTopUpWorkflowId,
  GENERATION_WORKFLOW,
  HOLD_SWEEP_SCHEDULE_ID,
  LOW_BALANCE_SCHEDULE_ID,
  PAYMENTS_RECONCILE_SCHEDULE_ID,
  RESULT_RETENTION_SCHEDULE_ID,
  SEARCH_ATTRIBUTES,
  TASK_QUEUE,
  WEBHOOK_WORKFLOW,
} from '../workflows/shared.ts';
import type { Env } from './env.ts';

export interface TemporalHandle {
  address: string;
  namespace: string;
  /** The Web UI of the embedded dev server; undefined with an external cluster. */
  uiUrl: string | undefined;
  client: Client;
  close(): Promise<void>;
}

/**
 * The cluster named by TEMPORAL_ADDRESS, or else the embedded dev server under DATA_DIR. The
 * job workflows' search attributes must exist on the namespace: the embedded server gets them
 * (at its start, or added here to one an older version started); a cluster's operator creates
 * them, and a start without them stops with the commands to run.
 */
export async function openTemporal(env: Pick<Env, 'TEMPORAL_ADDRESS' | 'TEMPORAL_NAMESPACE' | 'DATA_DIR' | 'TEMPORAL_UI_URL'>, logger: Logger): Promise<TemporalHandle> {
  const embedded = env.TEMPORAL_ADDRESS ? undefined : await startEmbeddedTemporal({ dataDir: env.DATA_DIR, logger, namespace: env.TEMPORAL_NAMESPACE, searchAttributes: jobSearchAttributeNames() });
  const address = env.TEMPORAL_ADDRESS ?? embedded!.address;
  const connection = await Connection.connect({ address });
  const close = async () => {
    await connection.close();
    await embedded?.release();
  };
  try {
    await ensureSearchAttributes(connection, env.TEMPORAL_NAMESPACE, { create: embedded !== undefined });
  } catch (err) {
    await close();
    throw err;
  }
  return {
    address,
    namespace: env.TEMPORAL_NAMESPACE,
    uiUrl: env.TEMPORAL_UI_URL?.replace(/\/+$/, '') ?? embedded?.uiUrl,
    // Tracing on: starting a workflow is a span whose context travels in the workflow's headers (workflows/tracing.ts).
    client: new Client({ connection, namespace: env.TEMPORAL_NAMESPACE, ...(tracingOn() ? { interceptors: { workflow: [new (tracingInterceptors().OpenTelemetryWorkflowClientInterceptor)()] } } : {}) }),
    close,
  };
}

/** Temporal's OpenTelemetry interceptors (CommonJS), required only with tracing on: off, a process never holds them. */
const tracingInterceptors = () => createRequire(import.meta.url)('@temporalio/interceptors-opentelemetry') as typeof import('@temporalio/interceptors-opentelemetry');

/** The job workflows' search attributes (all Keyword), for a dev server's `--search-attribute`. */
export const jobSearchAttributeNames = () => Object.values(SEARCH_ATTRIBUTES).map((key) => key.name);

/** The commands that create the search attributes on a cluster (docs/operations.md lists them too). */
export function searchAttributeCommands(namespace: string): string[] {
  return Object.values(SEARCH_ATTRIBUTES).map((key) => `temporal operator search-attribute create --namespace ${namespace} --name ${key.name} --type Keyword`);
}

/** Checks that the namespace has the search attributes the job workflows set; creates them when allowed. */
export async function ensureSearchAttributes(connection: Connection, namespace: string, opts: { create: boolean }): Promise<void> {
  const listed = await connection.operatorService.listSearchAttributes({ namespace });
  const have = listed.customAttributes ?? {};
  const missing = Object.values(SEARCH_ATTRIBUTES).filter((key) => have[key.name] === undefined);
  if (missing.length === 0) return;
  if (opts.create) {
    const keyword = proto.temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD;
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: Object.fromEntries(missing.map((key) => [key.name, keyword])) });
    return;
  }
  throw new Error(
    `The Temporal namespace '${namespace}' lacks the search attributes the job workflows set (${missing.map((k) => k.name).join(', ')}). ` +
      `Create them once, then start again:\n  ${searchAttributeCommands(namespace).join('\n  ')}`,
  );
}

/**
 * One Temporal Schedule for the whole cluster, however many instances start; creating it again
 * updates its interval. A run is skipped while the last one still goes.
 */
async function ensureSchedule(client: Client, scheduleId: string, workflowType: string, taskQueue: string, everySeconds: number, summary: string): Promise<void> {
  // A server still starting (a dev server on a loaded machine, a cluster rolling) may answer a
  // first call with DEADLINE_EXCEEDED or UNAVAILABLE: tried again for about half a minute
  // before the start gives up.
  for (let attempt = 1; ; attempt++) {
    try {
      return await createOrUpdateSchedule(client, scheduleId, workflowType, taskQueue, everySeconds, summary);
    } catch (err) {
      if (attempt >= 6 || !transientGrpc(err)) throw err;
      await new Promise((resolve) => setTimeout(resolve, 1000 * 2 ** (attempt - 1)));
    }
  }
}

/** A gRPC failure worth another try: the server did not answer in time, or could not be reached. */
export function transientGrpc(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === 4 || code === 14) return true;
  }
  return false;
}

async function createOrUpdateSchedule(client: Client, scheduleId: string, workflowType: string, taskQueue: string, everySeconds: number, summary: string): Promise<void> {
  const spec = { intervals: [{ every: `${everySeconds}s` }] };
  try {
    await client.schedule.create({
      scheduleId,
      spec,
      // The summary each run shows in the UI's workflow list.
      action: { type: 'startWorkflow', workflowType, taskQueue, args: [], staticSummary: summary },
      policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1 minute' },
    });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
    await client.schedule.getHandle(scheduleId).update((previous) => ({ ...previous, spec }));
  }
}

type ScheduleOpts = { taskQueue?: string; scheduleId?: string };
/** The default id on the service's task queue; a test's own task queue gets its own schedule. */
const scheduleIdOf = (opts: ScheduleOpts, id: string, suffix: string) => {
  const taskQueue = opts.taskQueue ?? TASK_QUEUE;
  return { taskQueue, scheduleId: opts.scheduleId ?? (taskQueue === TASK_QUEUE ? id : `${taskQueue}-${suffix}`) };
};

/** The hold sweep (holdSweepWorkflow): expired holds, jobs never started, jobs whose workflow closed without ending them. */
export async function ensureHoldSweepSchedule(client: Client, everySeconds: number, opts: ScheduleOpts = {}): Promise<void> {
  const { taskQueue, scheduleId } = scheduleIdOf(opts, HOLD_SWEEP_SCHEDULE_ID, 'hold-sweep');
  await ensureSchedule(client, scheduleId, 'holdSweepWorkflow', taskQueue, everySeconds, 'Sweep: release expired holds, start jobs left queued, fail and refund jobs whose workflow closed');
}

/**
 * The usage analytics' rollups (analyticsRefreshWorkflow). The admin analytics lag the ledger
 * by about this interval (core/admin/analytics/days.ts).
 */
export async function ensureAnalyticsRefreshSchedule(client: Client, everySeconds: number, opts: ScheduleOpts = {}): Promise<void> {
  const { taskQueue, scheduleId } = scheduleIdOf(opts, ANALYTICS_REFRESH_SCHEDULE_ID, 'analytics-refresh');
  await ensureSchedule(client, scheduleId, 'analyticsRefreshWorkflow', taskQueue, everySeconds, 'Rebuild the usage analytics of the days that changed');
}

/** Deleting results past their retention (resultRetentionWorkflow). */
export async function ensureResultRetentionSchedule(client: Client, everySeconds: number, opts: ScheduleOpts = {}): Promise<void> {
  const { taskQueue, scheduleId } = scheduleIdOf(opts, RESULT_RETENTION_SCHEDULE_ID, 'result-retention');
  await ensureSchedule(client, scheduleId, 'resultRetentionWorkflow', taskQueue, everySeconds, 'Delete job results past their retention');
}

/** The payments reconciliation (paymentsReconcileWorkflow): paid sessions and invoices the webhook missed. */
export async function ensurePaymentsReconcileSchedule(client: Client, everySeconds: number, opts: ScheduleOpts = {}): Promise<void> {
  const { taskQueue, scheduleId } = scheduleIdOf(opts, PAYMENTS_RECONCILE_SCHEDULE_ID, 'payments-reconcile');
  await ensureSchedule(client, scheduleId, 'paymentsReconcileWorkflow', taskQueue, everySeconds, 'Credit the paid Checkout Sessions and invoices of the last 3 days that the Stripe webhook missed');
}

/** The low-balance notices (lowBalanceNoticeWorkflow): one mail per account per crossing of its threshold. */
export async function ensureLowBalanceSchedule(client: Client, everySeconds: number, opts: ScheduleOpts = {}): Promise<void> {
  const { taskQueue, scheduleId } = scheduleIdOf(opts, LOW_BALANCE_SCHEDULE_ID, 'low-balance');
  await ensureSchedule(client, scheduleId, 'lowBalanceNoticeWorkflow', taskQueue, everySeconds, 'Mail the accounts whose balance fell below their notice threshold');
}

/**
 * The schedules, as the environment sets them: `npm start` and every worker ensure them
 * at start (one schedule per cluster, however many processes ensure it).
 */
export async function ensureSchedules(client: Client, env: Pick<Env, 'HOLD_SWEEP_INTERVAL_SECONDS' | 'TEMPORAL_TASK_QUEUE'>): Promise<void> {
  const opts = { taskQueue: env.TEMPORAL_TASK_QUEUE };
  // Releases reservations left open by a process that died mid-request; starts jobs never
  // started; fails and refunds jobs whose workflow an operator terminated.
  await ensureHoldSweepSchedule(client, env.HOLD_SWEEP_INTERVAL_SECONDS, opts);
  // Deletes job results past RESULT_RETENTION_SECONDS (within a minute of their expiry).
  await ensureResultRetentionSchedule(client, 60, opts);
  // Rebuilds the admin analytics' daily rollups of the days that changed (about a minute behind the ledger).
  await ensureAnalyticsRefreshSchedule(client, 60, opts);
  // Credits payments the Stripe webhook missed (hourly; a run with payments off lists nothing).
  await ensurePaymentsReconcileSchedule(client, 3600, opts);
  // Mails the accounts whose balance fell below the threshold they set (once per crossing).
  await ensureLowBalanceSchedule(client, 60, opts);
}

/** What an operator reads in the UI's list: model, price and the prompt's head (never the whole prompt). */
export function jobSummary(job: JobWorkflowStart): string {
  return `${job.model} · ${formatCoins(job.priceMicro)} coins · “${job.promptHead}”`;
}

/** Workflow close statuses as the port names them. */
const CLOSED: Record<string, string> = {
  COMPLETED: 'completed',
  FAILED: 'failed',
  CANCELLED: 'canceled',
  TERMINATED: 'terminated',
  TIMED_OUT: 'timed_out',
  CONTINUED_AS_NEW: 'continued_as_new',
};

/**
 * Starts an account's auto top-up workflow, its id `auto-topup-<account>`: while one runs,
 * starting another does nothing (the conflict is the "one per account at a time"); once it has
 * closed, the next low balance may start a new one.
 */
export function temporalAutoTopUps(client: Client, opts: { taskQueue?: string } = {}): AutoTopUpStarter {
  return {
    async start(accountId) {
      try {
        await client.workflow.start(AUTO_TOP_UP_WORKFLOW, {
          workflowId: autoTopUpWorkflowId(accountId),
          taskQueue: opts.taskQueue ?? TASK_QUEUE,
          args: [accountId],
          workflowIdReusePolicy: 'ALLOW_DUPLICATE',
          workflowIdConflictPolicy: 'FAIL',
          staticSummary: `Auto top-up of account ${accountId}`,
        });
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
    },
  };
}

/**
 * Starts a job's workflow, its id the job id, with the search attributes operators filter on
 * and a summary they read; a job never gets a second run (REJECT_DUPLICATE), so a workflow an
 * operator terminated is not started again behind their back.
 */
export function temporalGenerationStarter(client: Client, opts: { taskQueue?: string } = {}): GenerationStarter {
  return {
    async start(job) {
      try {
        const handle = await client.workflow.start(GENERATION_WORKFLOW, {
          workflowId: job.jobId,
          taskQueue: opts.taskQueue ?? TASK_QUEUE,
          args: [job.jobId],
          workflowIdReusePolicy: 'REJECT_DUPLICATE',
          typedSearchAttributes: [
            { key: SEARCH_ATTRIBUTES.accountId, value: job.accountId },
            { key: SEARCH_ATTRIBUTES.keyId, value: job.keyId },
            { key: SEARCH_ATTRIBUTES.model, value: job.model },
            { key: SEARCH_ATTRIBUTES.modelType, value: job.modelType },
            { key: SEARCH_ATTRIBUTES.jobStatus, value: 'queued' },
          ],
          staticSummary: jobSummary(job),
          staticDetails: [`**Job** ${job.jobId}`, `**Account** ${job.accountId}`, `**Key** ${job.keyId}`, `**Model** ${job.model} (${job.modelType})`, `**Price** ${formatCoins(job.priceMicro)} coins`].join('\n\n'),
        });
        return handle.firstExecutionRunId;
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
    },
    async cancel(jobId) {
      try {
        await client.workflow.getHandle(jobId).cancel();
      } catch (err) {
        // The workflow already closed (or never started): nothing left to stop.
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
    },
    async deliverWebhook(jobId) {
      try {
        await client.workflow.start(WEBHOOK_WORKFLOW, {
          workflowId: `${jobId}-webhook`,
          taskQueue: opts.taskQueue ?? TASK_QUEUE,
          args: [jobId],
          workflowIdReusePolicy: 'REJECT_DUPLICATE',
          staticSummary: `Webhook of job ${jobId}`,
        });
      } catch (err) {
        // Delivered (or being delivered) already: a job's webhook goes out once.
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
    },
    async state(jobId) {
      try {
        const { status } = await client.workflow.getHandle(jobId).describe();
        if (status.name === 'RUNNING') return { state: 'open' };
        return { state: 'closed', how: CLOSED[status.name] ?? status.name.toLowerCase() };
      } catch (err) {
        if (err instanceof WorkflowNotFoundError) return { state: 'missing' };
        throw err;
      }
    },
  };
}
