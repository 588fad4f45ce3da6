import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Server } from 'node:http';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createTestApp } from '../support/http.ts';
import { loadCatalogFile } from '../../config/catalog.ts';
import { temporalGenerationStarter } from '../../config/temporal.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps, testDatabaseUrl } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { expectSettledWallet } from '../support/ledger.ts';
import { spawnProject, type Spawned, entryArgs } from '../support/process.ts';

/**
 * Kill the worker process (SIGKILL) in the middle of jobs, start a new one: every job still
 * ends exactly once, the ledger matches, and no hold is left open.
 */
let orm: MikroORM;
let connection: Connection;
let server: Server;
let base: string;
let dataDir: string;
const taskQueue = `test-crash-${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-crash-'));
  connection = await Connection.connect({ address: inject('temporalAddress') });
  const deps = testDeps(orm, { storageDir: path.join(dataDir, 'storage'), generations: temporalGenerationStarter(new Client({ connection }), { taskQueue }) });
  const app = createTestApp({ deps, logger: silentLogger, publicBaseUrl: 'http://localhost' });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  await connection.close();
  await orm.close();
  await fs.rm(dataDir, { recursive: true, force: true });
});

async function startWorkerProcess(): Promise<Spawned> {
  const proc = spawnProject(entryArgs('worker'), {
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    TEMPORAL_TASK_QUEUE: taskQueue,
    DATA_DIR: dataDir,
  });
  await proc.waitFor(/Temporal worker running/);
  return proc;
}

describe('a worker killed mid-job', () => {
  it('is replaced by another and every job still ends exactly once', async () => {
    let worker = await startWorkerProcess();
    const customers = await Promise.all([0, 1].map(async () => {
      const account = await makeAccount(orm, { coins: '100' });
      return { account, key: (await makeKey(orm, account.id)).key };
    }));
    const jobs: { id: string; key: string; fail: boolean }[] = [];
    for (const [i, c] of customers.entries()) {
      for (let j = 0; j < 5; j++) {
        const fail = j === 4;
        const res = await getJson(`${base}/api/v1/generations`, {
          method: 'POST',
          headers: { ...bearer(c.key), 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'mas/image-demo', prompt: `job ${i}-${j}`, settings: { size: 128, delay_ms: 2500, fail } }),
        });
        expect(res.status).toBe(202);
        jobs.push({ id: res.body.id, key: c.key, fail });
      }
    }
    // Let the jobs get going, then kill the worker without warning.
    await vi.waitFor(async () => {
      const [row] = await orm.em.fork().execute<{ n: number }[]>(`select count(*)::int as n from generations where id in (${jobs.map(() => '?').join(',')}) and status = 'running'`, jobs.map((j) => j.id));
      expect(row!.n).toBeGreaterThan(0);
    }, { timeout: 20_000, interval: 100 });
    worker.child.kill('SIGKILL');
    await worker.exited;
    const [midway] = await orm.em.fork().execute<{ n: number }[]>(`select count(*)::int as n from generations where id in (${jobs.map(() => '?').join(',')}) and status in ('queued', 'running')`, jobs.map((j) => j.id));
    expect(midway!.n).toBeGreaterThan(0);

    worker = await startWorkerProcess();
    try {
      for (const job of jobs) {
        await vi.waitFor(async () => {
          const body = (await getJson(`${base}/api/v1/generations/${job.id}`, { headers: bearer(job.key) })).body;
          expect(body.status).toBe(job.fail ? 'failed' : 'succeeded');
        }, { timeout: 120_000, interval: 200 });
      }
    } finally {
      worker.child.kill('SIGTERM');
      await worker.exited;
    }

    // Exactly once: one capture per succeeded job, none per failed one, one end per hold.
    const em = orm.em.fork();
    for (const job of jobs) {
      const [row] = await em.execute<{ captures: number; releases: number; status: string }[]>(
        `select (select count(*)::int from ledger_entries where hold_id = g.hold_id and kind = 'capture') as captures,
                (select count(*)::int from ledger_entries where hold_id = g.hold_id and kind = 'release' and pocket = 'held') as releases,
                h.status
         from generations g join holds h on h.id = g.hold_id where g.id = ?`,
        [job.id],
      );
      expect(row).toEqual(job.fail ? { captures: 0, releases: 1, status: 'released' } : { captures: 1, releases: 0, status: 'settled' });
    }
    for (const c of customers) await expectSettledWallet(orm, c.account.id);
  }, 240_000);
});
