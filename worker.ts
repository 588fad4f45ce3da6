import { loadEnvOrExit } from './config/env.ts';
import { createLogger } from './config/logger.ts';
import { loadCatalogFile } from './config/catalog.ts';
import { buildCoreDeps } from './config/core.ts';
import { openDatabase } from './config/database.ts';
import { openTemporal, temporalGenerationStarter } from './config/temporal.ts';
import { startWorker } from './workflows/worker.ts';

/** `npm run worker`: a Temporal worker alone, so workers scale apart from API instances. */
const env = loadEnvOrExit();
const logger = createLogger(env.LOG_LEVEL);
const catalog = await loadCatalogFile(env.CATALOG_FILE, BigInt(env.API_PRICE_PERCENT));
const db = await openDatabase(env, logger);
const temporal = await openTemporal(env, logger);
const deps = await buildCoreDeps(env, db.orm, logger, catalog, temporalGenerationStarter(temporal.client, { taskQueue: env.TEMPORAL_TASK_QUEUE, retentionSeconds: env.RESULT_RETENTION_SECONDS }));
const worker = await startWorker({ deps, address: temporal.address, namespace: temporal.namespace, logger, taskQueue: env.TEMPORAL_TASK_QUEUE });

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    logger.info('worker shutting down: finishing activities in flight');
    void worker.shutdown();
  });
}
await worker.done.catch(() => undefined);
await temporal.close();
await deps.close();
await db.close();
logger.info('worker stopped');
