import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../adapters/embedded/postgres.ts';
import { startEmbeddedTemporal, type EmbeddedTemporal } from '../../adapters/embedded/temporal.ts';
import { createLogger } from '../../config/logger.ts';
import { migrate, openOrm } from '../../core/orm.ts';
import { SEARCH_ATTRIBUTES } from '../../workflows/shared.ts';

/**
 * The global setup of the mutation runs (vitest.mutation.config.ts): what
 * test/support/global-setup.ts provides (a fresh embedded PostgreSQL with the migrations
 * applied, a Temporal dev server), without building dist/: none of the selected tests starts
 * the built service, and Stryker runs it in a sandbox copy where dist/ is absent.
 */
let pg: EmbeddedPostgres | undefined;
let temporal: EmbeddedTemporal | undefined;
let dataDir: string | undefined;

export async function setup(project: TestProject): Promise<void> {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-mutation-'));
  const logger = createLogger('warn', process.stderr);
  pg = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'data'), database: 'mas_test', logger });
  const orm = await openOrm({ url: pg.url });
  await migrate(orm);
  await orm.close();
  project.provide('databaseUrl', pg.url);
  project.provide('adminDatabaseUrl', pg.adminUrl);
  temporal = await startEmbeddedTemporal({ dataDir: path.join(dataDir, 'data'), logger, searchAttributes: Object.values(SEARCH_ATTRIBUTES).map((k) => k.name) });
  project.provide('temporalUiUrl', temporal.uiUrl);
  project.provide('temporalAddress', temporal.address);
}

export async function teardown(): Promise<void> {
  await temporal?.release();
  await pg?.release();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
}
