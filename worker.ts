import './config/require-node.ts';
import { openRuntime, type Runtime } from './config/compose.ts';
import { failedToStart } from './config/start-errors.ts';
import { loadEnvOrExit } from './config/env.ts';
import { createLogger } from './config/logger.ts';
import { manageProcessLifecycle } from './config/process-lifecycle.ts';
import { ensureSchedules } from './config/temporal.ts';
import { startWorker, type RunningWorker } from './workflows/worker.ts';
import { startTelemetry } from './config/telemetry.ts';
import { createWorkerMetrics } from './adapters/http/metrics.ts';
import { serveWorkerMetrics } from './adapters/http/worker-metrics.ts';
import type { Server } from 'node:http';

/** `npm run worker`: a Temporal worker alone, so workers scale apart from API instances. */
const env = loadEnvOrExit();
const logger = createLogger(env.LOG_LEVEL, undefined, env.LOG_FORMAT);
// Off (no OTEL_EXPORTER_OTLP_ENDPOINT), nothing is started (config/telemetry.ts).
const telemetry = startTelemetry({ role: 'worker', logger });
// Signals, the npm that started us going away, uncaught errors: one graceful stop (config/process-lifecycle.ts).
const lifecycle = manageProcessLifecycle(logger, { stopTimeoutMs: env.SHUTDOWN_TIMEOUT_SECONDS * 1000 + 60_000 });

let runtime!: Runtime;
let worker!: RunningWorker;
let metricsServer: Server | undefined;
try {
  // A worker never migrates an external database (`npm run migrate` does, once): it refuses to start while one is pending.
  runtime = await openRuntime(env, logger, { temporal: true, migrations: 'check', changes: true });
  const temporal = runtime.temporal!;
  // The schedules run on workers: each worker makes sure they exist (one per cluster).
  await ensureSchedules(temporal.client, env);
  worker = await startWorker({
    deps: runtime.deps,
    address: temporal.address,
    namespace: temporal.namespace,
    logger,
    taskQueue: env.TEMPORAL_TASK_QUEUE,
    shutdownGraceSeconds: env.SHUTDOWN_TIMEOUT_SECONDS,
    tracing: telemetry,
  });
  // Its own /metrics, when asked for: the media upstream calls it makes and its breakers (docs/observability.md).
  if (env.WORKER_METRICS_PORT !== undefined) {
    metricsServer = await serveWorkerMetrics(createWorkerMetrics({ routes: runtime.deps.routeBreakers }), {
      port: env.WORKER_METRICS_PORT,
      host: env.HOST,
      token: env.METRICS_TOKEN,
      logger,
    });
    logger.info({ port: env.WORKER_METRICS_PORT }, 'worker metrics on /metrics');
  }
} catch (err) {
  await failedToStart(err, logger);
}
process.stdout.write(`Model Access Service worker running on task queue ${env.TEMPORAL_TASK_QUEUE}\n`);

// Stopped by a signal, or on its own after a fatal worker error (exit code 1).
const stopped = (async () => {
  const failed = await worker.done.then(() => false, () => true);
  await new Promise((resolve) => (metricsServer ? metricsServer.close(resolve) : resolve(undefined)));
  await runtime.close();
  await telemetry?.shutdown();
  logger.info('worker stopped');
  if (failed) process.exitCode = 1;
})();
lifecycle.setStop(async () => {
  logger.info({ graceSeconds: env.SHUTDOWN_TIMEOUT_SECONDS }, 'worker shutting down: no new tasks, finishing activities in flight (the rest are retried on other workers)');
  await worker.shutdown();
  await stopped;
});
await stopped;
