import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../adapters/embedded/postgres.ts';
import { startEmbeddedTemporal, type EmbeddedTemporal } from '../../adapters/embedded/temporal.ts';
import { createLogger } from '../../config/logger.ts';
import { migrate, openOrm } from '../../core/orm.ts';
import { SEARCH_ATTRIBUTES } from '../../workflows/shared.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
    adminDatabaseUrl: string;
    temporalAddress: string;
    /** The dev server's Web UI. */
    temporalUiUrl: string;
  }
}

let pg: EmbeddedPostgres | undefined;
let temporal: EmbeddedTemporal | undefined;
let dataDir: string | undefined;

/**
 * Starts the embedded PostgreSQL in a fresh `mktemp -d` folder (mode 0700, so a run as root
 * also proves the postgres user can reach a data directory inside a closed folder), creates
 * the test database and applies the migrations once; starts a Temporal dev server.
 */
export async function setup(project: TestProject): Promise<void> {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-test-'));
  const logger = createLogger('warn', process.stderr);
  pg = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'data'), database: 'mas_test', logger });
  const orm = await openOrm({ url: pg.url });
  await migrate(orm);
  await orm.close();
  project.provide('databaseUrl', pg.url);
  project.provide('adminDatabaseUrl', pg.adminUrl);
  // A real Temporal dev server from the same CLI binary `npm start` uses (installed on first use).
  temporal = await startEmbeddedTemporal({ dataDir: path.join(dataDir, 'data'), logger, searchAttributes: Object.values(SEARCH_ATTRIBUTES).map((k) => k.name) });
  project.provide('temporalUiUrl', temporal.uiUrl);
  project.provide('temporalAddress', temporal.address);
}

export async function teardown(): Promise<void> {
  await temporal?.release();
  await pg?.release();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
}
