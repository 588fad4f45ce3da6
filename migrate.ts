import './config/require-node.ts';
import { loadCatalogFile } from './config/catalog.ts';
import { openDatabase } from './config/database.ts';
import { failedToStart } from './config/start-errors.ts';
import { loadEnvOrExit } from './config/env.ts';
import { createLogger } from './config/logger.ts';
import { seedModels } from './core/catalog/catalog.ts';

/**
 * `npm run migrate`: brings the database named by DATABASE_URL (or the embedded one) to this
 * build's schema and adds the catalog file's new models, once per deployment, before API
 * instances and workers of this build start (they refuse to start while a migration is pending).
 * Safe to run twice or from two places at once (an advisory lock serialises migrations).
 */
const env = loadEnvOrExit();
const logger = createLogger(env.LOG_LEVEL, undefined, env.LOG_FORMAT);
try {
  const catalog = await loadCatalogFile(env.CATALOG_FILE, BigInt(env.API_PRICE_PERCENT));
  const db = await openDatabase(env, logger, 'apply');
  try {
    const added = await seedModels(db.orm.em.fork(), catalog);
    process.stdout.write(`Database up to date.${added.length > 0 ? ` Added catalog models: ${added.join(', ')}.` : ''}\n`);
  } finally {
    await db.close();
  }
} catch (err) {
  await failedToStart(err, logger);
}
