import { readFileSync, rmSync } from 'node:fs';
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
let forgetExit: (() => void) | undefined;

/**
 * Starts the embedded PostgreSQL in a fresh `mktemp -d` folder (mode 0700, so a run as root
 * also proves the postgres user can reach a data directory inside a closed folder), creates
 * the test database and applies the migrations once; starts a Temporal dev server.
 */
export async function setup(project: TestProject): Promise<void> {
  // The tests that run `npm start` run the built JavaScript, as production does: built again
  // here (beside the servers' start-up) when a source is newer than dist/.
  const built = buildIsStale().then((stale) => (stale ? build() : undefined));
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-test-'));
  forgetExit = stopServersOnExit(dataDir);
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
  await built;
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
