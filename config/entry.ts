import { loadEnvOrExit, type Env } from './env.ts';
import { collectWhenIdle } from './idle-gc.ts';
import { createLogger } from './logger.ts';
import { manageProcessLifecycle } from './process-lifecycle.ts';
import { startService, type ServiceRole } from './service.ts';
import { failedToStart } from './start-errors.ts';
import { startTelemetry } from './telemetry.ts';

/** Also in config/start-errors.ts, which the worker and `npm run migrate` import instead of this module. */
export { failedToStart };

/** The processes that serve HTTP: `npm start` (role `all`) and `npm run start:api` (role `api`). */
export async function runServer(role: ServiceRole): Promise<void> {
  const env: Env = loadEnvOrExit();
  const logger = createLogger(env.LOG_LEVEL, undefined, env.LOG_FORMAT);
  // Before anything serves: off (no OTEL_EXPORTER_OTLP_ENDPOINT), nothing is started (config/telemetry.ts).
  const telemetry = startTelemetry({ role, logger });
  // Signals, the npm that started us going away, uncaught errors: one graceful stop (config/process-lifecycle.ts).
  const lifecycle = manageProcessLifecycle(logger, {
    stopTimeoutMs: (env.SHUTDOWN_READINESS_DELAY_SECONDS + env.SHUTDOWN_TIMEOUT_SECONDS) * 1000 + 60_000,
  });
  const baseUrl = `${env.PUBLIC_BASE_URL}/api/v1`;
  try {
    const service = await startService(env, logger, {
      role,
      // Shown once, on the very first start, outside the logs: logs never carry a key.
      onDemoKey: (key, loginUrl) =>
        process.stdout.write(
          `\nDemo account created (demo@example.com). Its API key, shown only this once:\n\n  ${key}\n\n` +
            `Try it:\n\n  curl -H "Authorization: Bearer ${key}" ${baseUrl}/balance\n\n` +
            `Sign in to its account pages with this one-time link (valid 15 minutes; \`npm run mas -- account login-link --account demo@example.com\` makes another):\n\n  ${loginUrl}\n\n`,
        ),
      onTemporalUi: (url) => process.stdout.write(`Temporal Web UI (embedded dev server): ${url}\n`),
    });
    process.stdout.write(`Model Access Service listening on ${baseUrl}${role === 'api' ? ` (API instance, port ${service.port})` : ''}\n`);
    // Idle, V8 gets to give back what the start and busy times grew (config/idle-gc.ts).
    const idleGc = collectWhenIdle();
    lifecycle.setStop(async () => {
      idleGc.stop();
      await service.stop();
      // The spans still buffered leave before the process does.
      await telemetry?.shutdown();
    });
  } catch (err) {
    await failedToStart(err, logger);
  }
}
