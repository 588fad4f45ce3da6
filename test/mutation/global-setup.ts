import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import type { EmbeddedPostgres } from '../../adapters/embedded/postgres.ts';
import { startTestPostgres } from '../support/global-setup.ts';
import { startEmbeddedTemporal, type EmbeddedTemporal } from '../../adapters/embedded/temporal.ts';
import { createLogger } from '../../config/logger.ts';
import { SEARCH_ATTRIBUTES } from '../../workflows/shared.ts';
import { WORKFLOW_INTERCEPTOR_MODULE } from '../../workflows/tracing.ts';
import { bundleWorkflowCode } from '@temporalio/worker';
import { ensureSystemTool } from '../../scripts/support/system-tools.ts';

/**
 * The global setup of the mutation runs (vitest.mutation.config.ts): what
 * test/support/global-setup.ts provides (a fresh embedded PostgreSQL with the migrations
 * applied, a Temporal dev server), without building dist/: none of the selected tests starts
 * the built service, and Stryker runs it in a sandbox copy where dist/ is absent; the workflow
 * bundle the test workers load is made here instead. Redis is found (or fetched once per machine)
 * as there: test/integration/rate-limit-redis.test.ts runs beside one.
 */
let pg: EmbeddedPostgres | undefined;
let temporal: EmbeddedTemporal | undefined;
let dataDir: string | undefined;

export async function setup(project: TestProject): Promise<void> {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-mutation-'));
  const logger = createLogger('warn', process.stderr);
  pg = await startTestPostgres(project, path.join(dataDir, 'data'), logger);
  const [bundle] = await Promise.all([
    bundleWorkflows(dataDir),
    // A Redis that cannot be had here fails the test that uses it, with the reason (test/support/tools.ts).
    ensureSystemTool('redis-server', { logger }).then(
      (p) => project.provide('redisServer', p),
      (err: Error) => project.provide('redisServer', `unavailable: ${err.message}`),
    ),
    startEmbeddedTemporal({ dataDir: path.join(dataDir, 'data'), logger, searchAttributes: Object.values(SEARCH_ATTRIBUTES).map((k) => k.name) }).then((t) => (temporal = t)),
  ]);
  project.provide('workflowBundle', bundle);
  temporal = temporal!;
  project.provide('temporalUiUrl', temporal.uiUrl);
  project.provide('temporalAddress', temporal.address);
}

/**
 * The workflows bundled once for the whole run (no mutated file is workflow code): each mutant's
 * run starts workers, which would otherwise run webpack every time.
 */
async function bundleWorkflows(dir: string): Promise<string> {
    const { code } = await bundleWorkflowCode({
    workflowsPath: path.resolve(import.meta.dirname, '../../workflows/index.ts'),
    workflowInterceptorModules: [WORKFLOW_INTERCEPTOR_MODULE],
    logger: { trace() {}, debug() {}, info() {}, warn: (m) => console.warn(m), error: (m) => console.error(m), log() {} },
  });
  const file = path.join(dir, 'workflow-bundle.js');
  await fs.writeFile(file, code);
  return file;
}

export async function teardown(): Promise<void> {
  await temporal?.release();
  await pg?.release();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
}
