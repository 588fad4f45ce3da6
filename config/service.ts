import { recordServerAddress } from './server-address.ts';
import { existsSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { createHttpApp, lazyAdapter } from '../adapters/http/app.ts';
import { listen } from '../adapters/http/server.ts';
import { oauthAdapter } from '../adapters/mcp/oauth.ts';
import { restAdapter } from '../adapters/rest/rest.ts';
import { browserKit } from '../adapters/http/browser.ts';
import { webAdapter } from '../adapters/web/web.ts';
import { webhooksAdapter } from '../adapters/webhooks/webhooks.ts';
import { ensureDemoAccount } from '../core/accounts/demo.ts';
import { seedModels } from '../core/catalog/catalog.ts';
import { openRuntime } from './compose.ts';
import type { Env } from './env.ts';
import { ensureSchedules } from './temporal.ts';
import { startWorkerProcess } from './worker-process.ts';
import { RoleConfigError } from './start-errors.ts';

/** The service's version, from the package.json above this file (config/ in the sources, dist/config/ when built). */
function packageVersion(): string {
  for (let dir = import.meta.dirname; ; dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json');
    if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
    if (path.dirname(dir) === dir) return '0.0.0';
  }
}
const VERSION = packageVersion();

export interface RunningService {
  server: Server;
  port: number;
  /** Stops accepting, lets requests in flight finish, then closes the database. */
  stop(): Promise<void>;
}

/**
 * What a process runs: `all` is `npm start` (one machine: it migrates, seeds the catalog and
 * the demo account, and runs a worker unless RUN_WORKER=false, with embedded PostgreSQL and
 * Temporal when their addresses are unset); `api` is `npm run start:api`, one of many stateless
 * instances: no worker, no embedded server, no migration (`npm run migrate` runs once).
 */
export type ServiceRole = 'all' | 'api';

export { RoleConfigError };

/** The API server: core wired by the composition root, the HTTP adapters mounted on one server. */
export async function startService(
  env: Env,
  logger: Logger,
  opts: { role?: ServiceRole; onDemoKey?: (key: string, loginUrl: string) => void; onTemporalUi?: (url: string) => void } = {},
): Promise<RunningService> {
  const role = opts.role ?? 'all';
  if (role === 'api') {
    const missing = (['DATABASE_URL', 'TEMPORAL_ADDRESS'] as const).filter((name) => !env[name]);
    if (missing.length > 0) {
      throw new RoleConfigError(`npm run start:api starts no embedded servers: set ${missing.join(' and ')} (npm start runs everything on one machine).`);
    }
  }
  const runtime = await openRuntime(env, logger, { temporal: true, migrations: role === 'all' ? 'apply' : 'check', changes: true });
  const { deps } = runtime;
  const temporal = runtime.temporal!;

  if (role === 'all') {
    const added = await seedModels(deps.orm.em.fork(), runtime.catalog);
    if (added.length > 0) logger.info({ models: added }, 'added catalog models to the database');
    const demo = await ensureDemoAccount(deps.orm.em.fork(), env.DEMO_COINS);
    if (demo) opts.onDemoKey?.(demo.key, `${env.PUBLIC_BASE_URL}/login/link?token=${encodeURIComponent(demo.loginToken)}`);
    await ensureSchedules(temporal.client, env);
  }
  // The worker runs as a process of its own (config/worker-process.ts), on the servers this one opened.
  const worker = role === 'all' && env.RUN_WORKER
    ? startWorkerProcess({ env: { DATABASE_URL: runtime.databaseUrl, TEMPORAL_ADDRESS: temporal.address, TEMPORAL_NAMESPACE: temporal.namespace }, logger })
    : undefined;
  if (temporal.uiUrl) opts.onTemporalUi?.(temporal.uiUrl);

  const uploadSpoolDir = await uploadSpool(env.DATA_DIR);

  let draining = false;
  const kit = browserKit({ publicBaseUrl: env.PUBLIC_BASE_URL, secret: runtime.csrfSecret });
  const app = createHttpApp({
    deps,
    logger,
    publicBaseUrl: env.PUBLIC_BASE_URL,
    metricsToken: env.METRICS_TOKEN,
    trustProxy: env.TRUST_PROXY,
    isDraining: () => draining,
    // Each HTTP adapter is one line here; more specific paths first.
    adapters: [
      // The MCP server, the admin API and the admin pages load on their first request
      // (lazyAdapter: memory an instance nobody calls them on never pays).
      lazyAdapter('/api/v1/mcp', async () =>
        (await import('../adapters/mcp/mcp.ts')).mcpAdapter(deps, { publicBaseUrl: env.PUBLIC_BASE_URL, logger, version: VERSION, generateWaitSeconds: env.MCP_GENERATE_WAIT_SECONDS, generateQuietWaitSeconds: env.MCP_GENERATE_QUIET_WAIT_SECONDS, allowedHosts: env.MCP_ALLOWED_HOSTS }),
      ),
      restAdapter(deps, { publicBaseUrl: env.PUBLIC_BASE_URL, logger, uploadSpoolDir }),
      // Stripe's webhook (POST /webhooks/stripe): outside /api/v1, its body read raw on that route only.
      webhooksAdapter(deps, { logger }),
      // The OAuth authorization server and metadata for MCP clients (its consent page is one of the account pages).
      oauthAdapter(deps, { publicBaseUrl: env.PUBLIC_BASE_URL, windowLimiter: (w) => deps.limiters.window(w) }),
      lazyAdapter('/admin/graphql', async () => (await import('../adapters/graphql/graphql.ts')).graphqlAdapter(deps, { logger, uiUrl: temporal.uiUrl, namespace: temporal.namespace })),
      // The admin pages (/admin), after the admin API's /admin/graphql and before the account pages.
      lazyAdapter('/admin', async () => (await import('../adapters/web/admin/admin.ts')).adminPagesAdapter(deps, { kit, logger, publicBaseUrl: env.PUBLIC_BASE_URL, temporal: { uiUrl: temporal.uiUrl, namespace: temporal.namespace } })),
      // The account pages at the root, last: they answer every path no other adapter has.
      webAdapter(deps, { kit, logger, publicBaseUrl: env.PUBLIC_BASE_URL }),
    ],
  });
  const http = await listen(app, { port: env.PORT, host: env.HOST, shutdownTimeoutSeconds: env.SHUTDOWN_TIMEOUT_SECONDS, logger });
  logger.info({ port: http.port, publicBaseUrl: env.PUBLIC_BASE_URL, database: runtime.embeddedDatabase ? 'embedded' : 'external' }, 'listening');
  // For the CLI run beside it without this PORT (config/server-address.ts). A read-only DATA_DIR only loses that convenience.
  await recordServerAddress(env.DATA_DIR, env.PUBLIC_BASE_URL).catch((err: unknown) => logger.warn({ err }, 'could not record the server address in DATA_DIR'));

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      // Readiness fails first (/readyz answers 503), so that a balancer that probes it moves
      // away; requests keep being served for SHUTDOWN_READINESS_DELAY_SECONDS, then the
      // listener closes and requests in flight (streams too) get SHUTDOWN_TIMEOUT_SECONDS.
      draining = true;
      if (env.SHUTDOWN_READINESS_DELAY_SECONDS > 0) {
        logger.info({ seconds: env.SHUTDOWN_READINESS_DELAY_SECONDS }, 'shutting down: not ready any more, still serving until balancers notice');
        await new Promise((resolve) => setTimeout(resolve, env.SHUTDOWN_READINESS_DELAY_SECONDS * 1000));
      }
      logger.info('shutting down: no new connections, finishing requests in flight');
      await http.drain();
      await worker?.stop();
      await runtime.close();
      logger.info('stopped');
    })());

  return { server: http.server, port: http.port, stop };
}

/**
 * Uploads are spooled in DATA_DIR/uploads/<pid> while they arrive. A process killed mid-upload
 * (SIGKILL, a crash) cannot remove its partial parts: the next start removes the folders of
 * processes that are gone, so they are left on disk no longer than until then.
 */
async function uploadSpool(dataDir: string): Promise<string> {
  const root = path.join(dataDir, 'uploads');
  for (const name of await fs.readdir(root).catch(() => [] as string[])) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid <= 0 || (pid !== process.pid && isAlive(pid))) continue;
    await fs.rm(path.join(root, name), { recursive: true, force: true });
  }
  const dir = path.join(root, String(process.pid));
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  return dir;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
