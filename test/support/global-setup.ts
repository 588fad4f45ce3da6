import { readFileSync, rmSync } from 'node:fs';
import pgLib from 'pg';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../adapters/embedded/postgres.ts';
import { startEmbeddedTemporal, type EmbeddedTemporal } from '../../adapters/embedded/temporal.ts';
import { createLogger } from '../../config/logger.ts';
import { migrate, openOrm } from '../../core/orm.ts';
import { SEARCH_ATTRIBUTES } from '../../workflows/shared.ts';
import { build, buildIsStale } from '../../scripts/build.ts';
import { ROOT } from './process.ts';
import { ensureTemporalTestServer } from './temporal-test-server.ts';
import { ensureSystemTool, type SystemTool } from '../../scripts/support/system-tools.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A migrated database for what runs without a database of its own (test/support/file-database.ts). */
    databaseUrl: string;
    adminDatabaseUrl: string;
    /** The migrated template each test file's database is cloned from (test/support/db.ts). */
    templateDatabase: string;
    temporalAddress: string;
    /** The dev server's Web UI. */
    temporalUiUrl: string;
    /** The workflow bundle every test worker and replay loads (test/support/jobs.ts). */
    workflowBundle: string;
    /** The servers tests run beside the service (scripts/support/system-tools.ts): their executables, or `unavailable: why`. */
    redisServer: string;
    prometheus: string;
    chromium: string;
  }
}

const TEMPLATE = 'mas_template';

/**
 * The test server's settings. Test files run side by side, each with its own database and pools
 * (and the processes some start): room for their connections. Durability against a power cut is
 * no test's subject: fsync off saves a disk flush per commit (a killed server process still
 * loses nothing, the writes are in the system's cache; synchronous_commit stays on).
 */
const TEST_SERVER_SETTINGS = { max_connections: '400', fsync: 'off', full_page_writes: 'off' };

let pg: EmbeddedPostgres | undefined;
let temporal: EmbeddedTemporal | undefined;
let dataDir: string | undefined;
let forgetExit: (() => void) | undefined;

/**
 * Starts the embedded PostgreSQL in a fresh `mktemp -d` folder (mode 0700, so a run as root
 * also proves the postgres user can reach a data directory inside a closed folder), creates
 * the template database and applies the migrations once; starts a Temporal dev server; builds
 * dist/ when a source is newer; finds (or fetches once per machine, scripts/support/system-tools.ts)
 * the servers the tests run beside the service: Redis, Prometheus, Chromium. A run of the unit
 * tier alone needs none of it and starts nothing.
 */
export async function setup(project: TestProject): Promise<void> {
  const tiers = new Set(project.vitest.projects.map((p) => p.name));
  const patterns = (project.vitest as unknown as { filenamePattern?: string[] }).filenamePattern ?? [];
  const only = (dir: string) => patterns.length > 0 && patterns.every((p) => p.includes(`test/${dir}/`) || p.startsWith(`${dir}/`));
  if ([...tiers].every((t) => t === 'unit') || only('unit')) return;
  const logger = createLogger('warn', process.stderr);
  // The tests that run `npm start` run the built JavaScript, as production does: built again
  // here (beside the servers' start-up) when a source is newer than dist/.
  const built = buildIsStale().then((stale) => (stale ? build() : undefined));
  // A tool that cannot be had here fails the tests that use it, with the reason (test/support/tools.ts), never skips them.
  const tool = (name: 'redisServer' | 'prometheus' | 'chromium', which: SystemTool) =>
    ensureSystemTool(which, { logger }).then(
      (p) => project.provide(name, p),
      (err: Error) => project.provide(name, `unavailable: ${err.message}`),
    );
  const tools = Promise.all([
    tool('redisServer', 'redis-server'),
    tool('prometheus', 'prometheus'),
    tiers.has('browser') && !only('integration') && !only('e2e') ? tool('chromium', 'chromium') : undefined,
    // Temporal's time-skipping test server (Maven Central; test/support/temporal-test-server.ts), fetched once here rather than by the first file that starts one.
    ensureTemporalTestServer().catch((err: Error) => logger.warn({ err: err.message }, 'the time-skipping test server could not be fetched; the tests that use it will say why')),
  ]);
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-test-'));
  forgetExit = stopServersOnExit(dataDir);
  pg = await startTestPostgres(project, path.join(dataDir, 'data'), logger);
  // A real Temporal dev server from the same CLI binary `npm start` uses (installed on first use).
  temporal = await startEmbeddedTemporal({ dataDir: path.join(dataDir, 'data'), logger, searchAttributes: Object.values(SEARCH_ATTRIBUTES).map((k) => k.name) });
  project.provide('temporalUiUrl', temporal.uiUrl);
  project.provide('temporalAddress', temporal.address);
  await built;
  // The workers' workflow code in every test: the bundle the build made (no webpack per worker),
  // copied for this run so that a build during it cannot change it underneath.
  const bundle = path.join(dataDir, 'workflow-bundle.js');
  await fs.copyFile(path.join(ROOT, 'dist', 'workflows', 'bundle.js'), bundle);
  project.provide('workflowBundle', bundle);
  await tools;
}

/**
 * The test run's PostgreSQL: the embedded server with the test settings, a template database
 * with every migration applied (each test file clones it: test/support/file-database.ts), and a
 * clone of it for what runs without a database of its own.
 */
export async function startTestPostgres(project: TestProject, dir: string, logger: ReturnType<typeof createLogger>): Promise<EmbeddedPostgres> {
  const server = await startEmbeddedPostgres({ dataDir: dir, database: TEMPLATE, logger, settings: TEST_SERVER_SETTINGS });
  const orm = await openOrm({ url: server.url });
  await migrate(orm);
  await orm.close();
  // The template takes no connections from now on, so that a clone never finds it in use.
  const admin = new pgLib.Client(server.adminUrl);
  await admin.connect();
  await admin.query(`alter database ${TEMPLATE} with is_template true allow_connections false`);
  await admin.query(`create database mas_test template ${TEMPLATE}`);
  await admin.end();
  project.provide('databaseUrl', server.url.replace(/\/[^/]+$/, '/mas_test'));
  project.provide('adminDatabaseUrl', server.adminUrl);
  project.provide('templateDatabase', TEMPLATE);
  return server;
}

export async function teardown(): Promise<void> {
  forgetExit?.();
  await temporal?.release();
  await pg?.release();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
}

/**
 * On SIGINT or SIGTERM (a Ctrl-C on `npm test`) vitest exits at once, without running
 * `teardown`: the servers this run started would be left running. Its exit then stops them
 * here, synchronously (an exit handler cannot wait for promises): PostgreSQL by its fast
 * shutdown (SIGINT), the Temporal dev server by SIGTERM (SIGKILL after 10 s), and removes
 * the folder once they are gone.
 */
function stopServersOnExit(dir: string): () => void {
  const onExit = () => {
    const read = (file: string, pick: (text: string) => number) => {
      try {
        const pid = pick(readFileSync(path.join(dir, 'data', file), 'utf8'));
        return Number.isInteger(pid) && pid > 0 ? pid : undefined;
      } catch {
        return undefined;
      }
    };
    const postmaster = read('postgres/postmaster.pid', (t) => Number(t.split('\n')[0]));
    const dev = read('temporal/server.json', (t) => (JSON.parse(t) as { pid: number }).pid);
    const signal = (pid: number | undefined, name: NodeJS.Signals) => {
      try {
        if (pid) process.kill(pid, name);
      } catch {
        // gone already
      }
    };
    const alive = (pid: number | undefined) => {
      if (!pid) return false;
      try {
        // An exited child of this process is a zombie until this process ends: not alive.
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]!);
      } catch {
        try {
          process.kill(pid, 0);
          return process.platform !== 'linux';
        } catch {
          return false;
        }
      }
    };
    signal(postmaster, 'SIGINT');
    signal(dev, 'SIGTERM');
    const pause = new Int32Array(new SharedArrayBuffer(4));
    const until = Date.now() + 10_000;
    while ((alive(postmaster) || alive(dev)) && Date.now() < until) Atomics.wait(pause, 0, 0, 50);
    signal(dev, 'SIGKILL');
    if (!alive(postmaster)) rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', onExit);
  return () => process.off('exit', onExit);
}
