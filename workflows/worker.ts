import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Logger } from 'pino';
import type { CoreDeps } from '../core/context.ts';
import { createActivities } from './activities.ts';
import { TASK_QUEUE } from './shared.ts';

/**
 * The workflow code: the bundle `npm run build` made (dist/workflows/bundle.js, beside this
 * file when it runs from dist/), or else the sources, bundled by webpack at start (tests, tsx).
 */
function workflowCode(): { workflowBundle: { codePath: string } } | { workflowsPath: string } {
  const bundle = fileURLToPath(new URL('./bundle.js', import.meta.url));
  if (existsSync(bundle)) return { workflowBundle: { codePath: bundle } };
  return { workflowsPath: fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './index.ts' : './index.js', import.meta.url)) };
}

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
    ...workflowCode(),
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
