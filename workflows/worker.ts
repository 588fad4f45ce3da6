import { createRequire } from 'node:module';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Logger } from 'pino';
import type { CoreDeps } from '../core/context.ts';
import { createActivities } from './activities.ts';
import { TASK_QUEUE } from './shared.ts';

const require = createRequire(import.meta.url);

export interface RunningWorker {
  /** Resolves when the worker has stopped. */
  done: Promise<void>;
  shutdown(): Promise<void>;
}

/** A Temporal worker for this service's workflows and activities. */
export async function startWorker(opts: {
  deps: CoreDeps;
  address: string;
  namespace: string;
  logger: Logger;
  taskQueue?: string;
  /**
   * On shutdown, how long activities in flight may run on before they are cancelled; a
   * cancelled attempt is retried by Temporal on another worker (every step is idempotent).
   */
  shutdownGraceSeconds?: number;
}): Promise<RunningWorker> {
  const connection = await NativeConnection.connect({ address: opts.address });
  const worker = await Worker.create({
    connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue ?? TASK_QUEUE,
    workflowsPath: require.resolve('./index.ts'),
    activities: createActivities(opts.deps),
    shutdownGraceTime: `${opts.shutdownGraceSeconds ?? 0}s`,
  });
  const done = worker.run().finally(() => connection.close());
  done.catch((err: unknown) => opts.logger.error({ err }, 'Temporal worker stopped with an error'));
  opts.logger.info({ taskQueue: opts.taskQueue ?? TASK_QUEUE }, 'Temporal worker running');
  return {
    done,
    async shutdown() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await done.catch(() => undefined);
    },
  };
}
