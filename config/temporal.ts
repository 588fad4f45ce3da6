import { Client, Connection, ScheduleAlreadyRunning, ScheduleOverlapPolicy } from '@temporalio/client';
import type { Logger } from 'pino';
import { startEmbeddedTemporal } from '../adapters/embedded/temporal.ts';
import { HOLD_SWEEP_SCHEDULE_ID, TASK_QUEUE } from '../workflows/shared.ts';
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
export async function openTemporal(env: Pick<Env, 'TEMPORAL_ADDRESS' | 'TEMPORAL_NAMESPACE' | 'DATA_DIR'>, logger: Logger): Promise<TemporalHandle> {
  const embedded = env.TEMPORAL_ADDRESS ? undefined : await startEmbeddedTemporal({ dataDir: env.DATA_DIR, logger, namespace: env.TEMPORAL_NAMESPACE });
  const address = env.TEMPORAL_ADDRESS ?? embedded!.address;
  const connection = await Connection.connect({ address });
  return {
    address,
    namespace: env.TEMPORAL_NAMESPACE,
    uiUrl: embedded?.uiUrl,
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
  { scheduleId = HOLD_SWEEP_SCHEDULE_ID, taskQueue = TASK_QUEUE } = {},
): Promise<void> {
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
