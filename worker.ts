import { loadEnvOrExit } from './config/env.ts';
import { createLogger } from './config/logger.ts';
import { openRuntime } from './config/compose.ts';
import { manageProcessLifecycle } from './config/process-lifecycle.ts';
import { startWorker } from './workflows/worker.ts';

/** `npm run worker`: a Temporal worker alone, so workers scale apart from API instances. */
const env = loadEnvOrExit();
const logger = createLogger(env.LOG_LEVEL);
// Signals, the npm that started us going away, uncaught errors: one graceful stop (config/process-lifecycle.ts).
const lifecycle = manageProcessLifecycle(logger);
const runtime = await openRuntime(env, logger, { temporal: true });
const temporal = runtime.temporal!;
const worker = await startWorker({ deps: runtime.deps, address: temporal.address, namespace: temporal.namespace, logger, taskQueue: env.TEMPORAL_TASK_QUEUE });

// Stopped by a signal, or on its own after a fatal worker error (exit code 1).
const stopped = (async () => {
  const failed = await worker.done.then(() => false, () => true);
  await runtime.close();
  logger.info('worker stopped');
  if (failed) process.exitCode = 1;
})();
lifecycle.setStop(async () => {
  logger.info('worker shutting down: finishing activities in flight');
  await worker.shutdown();
  await stopped;
});
await stopped;
