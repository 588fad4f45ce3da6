import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { MikroORM } from '@mikro-orm/postgresql';
import { openOrm } from '../../core/orm.ts';
import { startCluster, type Cluster, type ClusterOptions } from '../../scripts/support/cluster.ts';
import { makeAccount, makeKey } from '../support/db.ts';

/**
 * The scale tests' cluster (scripts/support/cluster.ts) and what they read it with: an ORM and a
 * plain client on its PostgreSQL, funded accounts and keys, and which instance answered.
 */
export interface TestCluster {
  cluster: Cluster;
  orm: MikroORM;
  sql: pg.Client;
  /** An account with `coins` purchased coins and one key of it (the secret). */
  fundedKey(coins?: string): Promise<{ accountId: string; keyId: string; key: string }>;
  stop(): Promise<void>;
}

export async function startTestCluster(name: string, opts: Omit<ClusterOptions, 'dir'> = {}): Promise<TestCluster> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), `mas-scale-${name}-`));
  const cluster = await startCluster({ ...opts, dir, say: (line) => process.stderr.write(`[cluster ${name}] ${line}\n`) });
  const orm = await openOrm({ url: cluster.databaseUrl, poolMax: 5 });
  const sql = new pg.Client({ connectionString: cluster.databaseUrl });
  await sql.connect();
  return {
    cluster,
    orm,
    sql,
    async fundedKey(coins = '1000') {
      const account = await makeAccount(orm, { coins });
      const key = await makeKey(orm, account.id);
      return { accountId: account.id, keyId: key.id, key: key.key };
    },
    async stop() {
      await sql.end().catch(() => undefined);
      await orm.close().catch(() => undefined);
      await cluster.stop();
      // Keep the logs of a failed run for CI's artifacts; remove the rest.
      if (!process.env.KEEP_CLUSTER_DIR) await fs.rm(dir, { recursive: true, force: true }).catch(() => undefined);
    },
  };
}

/** The instance that answered (nginx's X-Upstream: `127.0.0.1:port`), by port. */
export function upstreamOf(res: Response): string {
  const addr = res.headers.get('x-upstream') ?? '';
  // After a refused connection nginx lists every address it tried: the last one answered.
  return addr.split(',').pop()!.trim();
}

/** Now, in milliseconds with a fraction: comparable with PostgreSQL's timestamps (same clock). */
export const nowMs = () => performance.timeOrigin + performance.now();

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
