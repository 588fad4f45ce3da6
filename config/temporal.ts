import { Client, Connection, ScheduleAlreadyRunning, ScheduleOverlapPolicy, WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import type { GenerationStarter } from '../core/ports.ts';
import type { Logger } from 'pino';
import { startEmbeddedTemporal } from '../adapters/embedded/temporal.ts';
import { ANALYTICS_REFRESH_SCHEDULE_ID, HOLD_SWEEP_SCHEDULE_ID, TASK_QUEUE, GENERATION_WORKFLOW } from '../workflows/shared.ts';
import type { Env } from './env.ts';

export interface TemporalHandle {
  address: string;
  namespace: string;
  /** The Web UI of the embedded dev server; undefined with an external cluster. */
  uiUrl: string | undefined;
  client: Client;
  close(): Promise<void>;
}

/** The cluster named by TEMPORAL_ADDRESS, or else the embedded dev server under DATA_DIR. */
export async function openTemporal(env: Pick<Env, 'TEMPORAL_ADDRESS' | 'TEMPORAL_NAMESPACE' | 'DATA_DIR' | 'TEMPORAL_UI_URL'>, logger: Logger): Promise<TemporalHandle> {
  const embedded = env.TEMPORAL_ADDRESS ? undefined : await startEmbeddedTemporal({ dataDir: env.DATA_DIR, logger, namespace: env.TEMPORAL_NAMESPACE });
  const address = env.TEMPORAL_ADDRESS ?? embedded!.address;
  const connection = await Connection.connect({ address });
  return {
    address,
    namespace: env.TEMPORAL_NAMESPACE,
    uiUrl: env.TEMPORAL_UI_URL?.replace(/\/+$/, '') ?? embedded?.uiUrl,
    client: new Client({ connection, namespace: env.TEMPORAL_NAMESPACE }),
    async close() {
      await connection.close();
      await embedded?.release();
    },
  };
}

/**
 * The hold sweep runs as a Temporal Schedule: one schedule for the whole cluster, however many
 * instances start. Creating it again updates its interval.
 */
export async function ensureHoldSweepSchedule(
  client: Client,
  everySeconds: number,
  opts: { taskQueue?: string; scheduleId?: string } = {},
): Promise<void> {
  const taskQueue = opts.taskQueue ?? TASK_QUEUE;
  const scheduleId = opts.scheduleId ?? (taskQueue === TASK_QUEUE ? HOLD_SWEEP_SCHEDULE_ID : `${taskQueue}-hold-sweep`);
  const spec = { intervals: [{ every: `${everySeconds}s` }] };
  try {
    await client.schedule.create({
      scheduleId,
      spec,
      action: { type: 'startWorkflow', workflowType: 'holdSweepWorkflow', taskQueue, args: [] },
      policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1 minute' },
    });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
    await client.schedule.getHandle(scheduleId).update((previous) => ({ ...previous, spec }));
  }
}

/**
 * The usage analytics' rollups are rebuilt by a Temporal Schedule (`analyticsRefreshWorkflow`),
 * like the hold sweep: one for the whole cluster, a run skipped while the last one still goes.
 * The admin analytics lag the ledger by about this interval (core/admin/analytics/days.ts).
 */
export async function ensureAnalyticsRefreshSchedule(
  client: Client,
  everySeconds: number,
  opts: { taskQueue?: string; scheduleId?: string } = {},
): Promise<void> {
  const taskQueue = opts.taskQueue ?? TASK_QUEUE;
  const scheduleId = opts.scheduleId ?? (taskQueue === TASK_QUEUE ? ANALYTICS_REFRESH_SCHEDULE_ID : `${taskQueue}-analytics-refresh`);
  const spec = { intervals: [{ every: `${everySeconds}s` }] };
  try {
    await client.schedule.create({
      scheduleId,
      spec,
      action: { type: 'startWorkflow', workflowType: 'analyticsRefreshWorkflow', taskQueue, args: [] },
      policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1 minute' },
    });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
    await client.schedule.getHandle(scheduleId).update((previous) => ({ ...previous, spec }));
  }
}

/** Starts a job's workflow, its id the job id; a second start of the same job is a no-op. */
export function temporalGenerationStarter(client: Client, opts: { taskQueue?: string; retentionSeconds?: number } = {}): GenerationStarter {
  return {
    async start(jobId) {
      try {
        const handle = await client.workflow.start(GENERATION_WORKFLOW, {
          workflowId: jobId,
          taskQueue: opts.taskQueue ?? TASK_QUEUE,
          args: [jobId, { retentionSeconds: opts.retentionSeconds ?? 3600 }],
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
  };
}
