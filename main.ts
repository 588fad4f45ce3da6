import { loadEnvOrExit } from './config/env.ts';
import { createLogger } from './config/logger.ts';
import { manageProcessLifecycle } from './config/process-lifecycle.ts';
import { startService } from './config/service.ts';
import { CatalogError } from './core/catalog/catalog.ts';

const env = loadEnvOrExit();

const logger = createLogger(env.LOG_LEVEL);
// Signals, the npm that started us going away, uncaught errors: one graceful stop (config/process-lifecycle.ts).
const lifecycle = manageProcessLifecycle(logger, { stopTimeoutMs: env.SHUTDOWN_TIMEOUT_SECONDS * 1000 + 60_000 });
const baseUrl = `${env.PUBLIC_BASE_URL}/api/v1`;

try {
  const service = await startService(env, logger, {
    // Shown once, on the very first start, outside the logs: logs never carry a key.
    onDemoKey: (key, loginUrl) =>
      process.stdout.write(
        `\nDemo account created (demo@example.com). Its API key, shown only this once:\n\n  ${key}\n\n` +
          `Try it:\n\n  curl -H "Authorization: Bearer ${key}" ${baseUrl}/balance\n\n` +
          `Sign in to its account pages with this one-time link (valid 15 minutes; \`npm run mas -- account login-link --account demo@example.com\` makes another):\n\n  ${loginUrl}\n\n`,
      ),
    onTemporalUi: (url) => process.stdout.write(`Temporal Web UI (embedded dev server): ${url}\n`),
  });
  process.stdout.write(`Model Access Service listening on ${baseUrl}\n`);
  lifecycle.setStop(() => service.stop());
} catch (err) {
  if (err instanceof CatalogError) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
  logger.fatal({ err }, 'could not start');
  logger.flush();
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 100).unref();
}
