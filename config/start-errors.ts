import type { Logger } from 'pino';
import { CatalogError } from '../core/catalog/catalog.ts';
import { PlansError } from '../core/payments/plans.ts';
import { PendingMigrationsError } from './database.ts';

/**
 * What ends a start-up, apart from config/entry.ts (the HTTP server's start) so that the
 * worker (worker.ts) and `npm run migrate` can use it without importing the API server and
 * its adapters.
 */
export class RoleConfigError extends Error {}

/**
 * A start-up that cannot go on: what the operator must fix is one line on stderr (a bad catalog or plans file,
 * migrations not applied, a role without its servers); anything else is logged as fatal. Exit 1.
 */
export async function failedToStart(err: unknown, logger: Logger): Promise<never> {
  if (err instanceof CatalogError || err instanceof PlansError || err instanceof PendingMigrationsError || err instanceof RoleConfigError) {
    process.stderr.write(`${err.message}\n`);
  } else {
    logger.fatal({ err }, 'could not start');
    logger.flush();
    // Let the log line leave before exiting.
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  process.exit(1);
}
