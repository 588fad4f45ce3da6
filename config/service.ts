import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { createRestApp } from '../adapters/rest/app.ts';
import { createCoreDeps } from '../core/context.ts';
import { ensureDemoAccount } from '../core/accounts/demo.ts';
import { openDatabase } from './database.ts';
import type { Env } from './env.ts';

export interface RunningService {
  server: Server;
  port: number;
  /** Stops accepting, lets requests in flight finish, then closes the database. */
  stop(): Promise<void>;
}

/** The composition root of the API server: wires core and adapters from the configuration. */
export async function startService(env: Env, logger: Logger, hooks: { onDemoKey?: (key: string) => void } = {}): Promise<RunningService> {
  const db = await openDatabase(env, logger);
  const deps = createCoreDeps({
    orm: db.orm,
    logger,
    config: { holdTtlSeconds: env.HOLD_TTL_SECONDS, demoCoins: env.DEMO_COINS },
  });

  const demo = await ensureDemoAccount(db.orm.em.fork(), env.DEMO_COINS);
  if (demo) hooks.onDemoKey?.(demo.key);

  let draining = false;
  const app = createRestApp({
    deps,
    logger,
    publicBaseUrl: env.PUBLIC_BASE_URL,
    metricsToken: env.METRICS_TOKEN,
    trustProxy: env.TRUST_PROXY,
    isDraining: () => draining,
  });

  const server = await new Promise<Server>((resolve, reject) => {
    const s = app.listen(env.PORT, env.HOST, (err?: Error) => (err ? reject(err) : resolve(s)));
  });
  server.keepAliveTimeout = 65_000; // longer than common load balancer idle timeouts
  const port = (server.address() as { port: number }).port;
  logger.info({ port, publicBaseUrl: env.PUBLIC_BASE_URL, database: db.embedded ? 'embedded' : 'external' }, 'listening');

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      draining = true;
      logger.info('shutting down: no new connections, finishing requests in flight');
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const timeout = setTimeout(() => {
        logger.warn('requests still in flight after the shutdown timeout: closing their connections');
        server.closeAllConnections();
      }, env.SHUTDOWN_TIMEOUT_SECONDS * 1000);
      await closed;
      clearTimeout(timeout);
      await db.close();
      logger.info('stopped');
    })());

  return { server, port, stop };
}
