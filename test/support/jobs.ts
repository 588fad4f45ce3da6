import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createServer, type Server } from 'node:http';
import { Client, Connection, type HistoryAndWorkflowId } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { expect, inject } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createTestApp } from './http.ts';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { temporalGenerationStarter } from '../../config/temporal.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import type { ProviderConfig } from '../../core/catalog/schema.ts';
import type { CoreDeps } from '../../core/context.ts';
import { startWorker, type RunningWorker } from '../../workflows/worker.ts';
import { TEST_CATALOG } from './catalog.ts';
import { openTestOrm, silentLogger, testDeps } from './db.ts';

/**
 * What every media-job test needs: the test database with the shipped and the test catalog,
 * a Temporal client and a real worker on a task queue of its own, and the REST app on a real
 * port of this machine, all sharing one set of core dependencies.
 */
export interface JobHarness {
  orm: MikroORM;
  deps: CoreDeps;
  connection: Connection;
  worker: RunningWorker;
  base: string;
  storageDir: string;
  taskQueue: string;
  close(): Promise<void>;
}

export async function startJobHarness(
  opts: {
    retentionSeconds?: number;
    mediaProviders?: Record<string, ProviderConfig>;
    worker?: boolean;
    /** PUBLIC_BASE_URL is the served URL itself (OAuth: the issuer and the MCP resource must be reachable); else http://localhost. */
    publicBaseUrlIsServed?: boolean;
    /** PUBLIC_BASE_URL is not set: its default, http://localhost:<the served port> (loopback OAuth, docs/oauth.md). */
    publicBaseUrlIsDefault?: boolean;
    /** How long MCP `generate` waits without a progressToken (MCP_GENERATE_QUIET_WAIT_SECONDS; 50 s by default). */
    mcpGenerateQuietWaitSeconds?: number;
    /** How often MCP `generate` sends progress (10 s in production): 1 s lets a test see ticks of a job that takes seconds. */
    mcpProgressEverySeconds?: number;
    /** The first wait before a provider step is tried again (100 ms here; 1 s in production). */
    jobStepRetryInitialMs?: number;
  } = {},
): Promise<JobHarness> {
  // The port is taken first, so that PUBLIC_BASE_URL can name it; the app answers once it exists.
  const server = await new Promise<Server>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
  const port = (server.address() as { port: number }).port;
  const base = `http://127.0.0.1:${port}`;
  const publicBaseUrl = opts.publicBaseUrlIsServed ? base : opts.publicBaseUrlIsDefault ? `http://localhost:${port}` : 'http://localhost';
  const orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  await seedModels(orm.em.fork(), validateCatalog(TEST_CATALOG, 50n));
  const taskQueue = `test-${randomBytes(5).toString('hex')}`;
  const storageDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-jobs-'));
  const connection = await Connection.connect({ address: inject('temporalAddress') });
  const deps = testDeps(orm, {
    storageDir,
    generations: temporalGenerationStarter(new Client({ connection }), { taskQueue }),
    ...(opts.retentionSeconds ? { retentionSeconds: opts.retentionSeconds } : {}),
    ...(opts.mediaProviders ? { mediaProviders: opts.mediaProviders } : {}),
    providers: createProviderRegistry({ local: { kind: 'local' } }),
    // A failing provider step is tried again after 100 ms, doubling, not after 1 s: a job that
    // fails over to its next route, or fails, takes a fraction of a second per route.
    jobStepRetryInitialMs: opts.jobStepRetryInitialMs ?? 100,
    ...(opts.publicBaseUrlIsDefault ? { publicBaseUrl: null, env: { PORT: String(port) } } : { publicBaseUrl }),
  });
  const worker =
    opts.worker === false
      ? { done: Promise.resolve(), shutdown: async () => undefined }
      : await startTestWorker({ deps, taskQueue });
  server.on('request', createTestApp({ deps, logger: silentLogger, publicBaseUrl, mcpGenerateQuietWaitSeconds: opts.mcpGenerateQuietWaitSeconds, mcpProgressEverySeconds: opts.mcpProgressEverySeconds }));
  return {
    orm,
    deps,
    connection,
    worker,
    base,
    storageDir,
    taskQueue,
    async close() {
      // A close that takes long says which step took it (a hook once timed out here under load).
      const t0 = Date.now();
      const steps: string[] = [];
      const step = (name: string) => steps.push(`${name} at ${Date.now() - t0} ms`);
      const report = setTimeout(() => console.error(`[job harness] close still running: ${steps.join(', ') || 'worker shutdown'}…`), 10_000);
      await worker.shutdown();
      step('worker');
      await connection.close();
      step('connection');
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      step('server');
      await orm.close();
      step('orm');
      clearTimeout(report);
      if (Date.now() - t0 > 10_000) console.error(`[job harness] slow close: ${steps.join(', ')}`);
      await fs.rm(storageDir, { recursive: true, force: true });
    },
  };
}

/**
 * A real worker of this service's workflows and activities for a test, on the test's Temporal
 * (the shared dev server unless `connection` is given) and task queue. Its workflows are the
 * bundle the global setup built (`npm run build`'s, test/support/global-setup.ts): no webpack
 * per worker.
 */
export function startTestWorker(opts: Omit<Parameters<typeof startWorker>[0], 'address' | 'namespace' | 'logger'> & { logger?: Parameters<typeof startWorker>[0]['logger'] }): Promise<RunningWorker> {
  return startWorker({ address: inject('temporalAddress'), namespace: 'default', logger: silentLogger, shutdownForceSeconds: 30, workflowBundlePath: inject('workflowBundle'), ...opts });
}

/** Replays workflow histories against today's workflow code (the built bundle): every one must replay without a determinism error. */
export async function expectReplays(histories: HistoryAndWorkflowId[]): Promise<void> {
  let replayed = 0;
  for await (const result of Worker.runReplayHistories({ workflowBundle: { codePath: inject('workflowBundle') } }, histories)) {
    expect(result.error, result.workflowId).toBeUndefined();
    replayed++;
  }
  expect(replayed).toBe(histories.length);
}
