import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadCatalogFile } from '../../config/catalog.ts';
import { temporalGenerationStarter } from '../../config/temporal.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps, testDatabaseUrl } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { freePort, spawnProject, type Spawned, entryArgs } from '../support/process.ts';

/**
 * A standalone worker (`npm run worker`) with WORKER_METRICS_PORT serves its own /metrics: the
 * media jobs' upstream calls are made in the worker, so the API instances' /metrics cannot show
 * them (docs/observability.md). A real worker process runs a real job from the REST API here.
 */
const TOKEN = `metrics-${randomBytes(8).toString('hex')}`;
const taskQueue = `worker-metrics-${randomBytes(4).toString('hex')}`;
let orm: MikroORM;
let connection: Connection;
let api: { base: string; close: () => Promise<void> };
let worker: Spawned;
let metricsUrl: string;
let dataDir: string;

beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-worker-metrics-'));
  connection = await Connection.connect({ address: inject('temporalAddress') });
  const deps = testDeps(orm, { storageDir: path.join(dataDir, 'storage'), generations: temporalGenerationStarter(new Client({ connection }), { taskQueue }) });
  api = await serve(createTestApp({ deps, logger: silentLogger, publicBaseUrl: 'http://localhost' }));
  const port = await freePort();
  metricsUrl = `http://127.0.0.1:${port}/metrics`;
  worker = spawnProject(entryArgs('worker'), {
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    TEMPORAL_TASK_QUEUE: taskQueue,
    DATA_DIR: dataDir,
    HOST: '127.0.0.1',
    WORKER_METRICS_PORT: String(port),
    METRICS_TOKEN: TOKEN,
  });
  await worker.waitFor(/worker running on task queue/, 120_000);
}, 180_000);

afterAll(async () => {
  if (worker) {
    worker.child.kill('SIGTERM');
    await worker.exited;
  }
  await api?.close();
  await connection?.close();
  await orm?.close();
  await fs.rm(dataDir, { recursive: true, force: true });
});

describe('the worker’s own /metrics', () => {
  it('needs the metrics token, and serves nothing but GET /metrics', async () => {
    expect((await getJson(metricsUrl)).status).toBe(401);
    const wrong = await getJson(metricsUrl, { headers: bearer('not-the-token') });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error.code).toBe('invalid_metrics_token');
    expect(JSON.stringify(wrong.body)).not.toContain(TOKEN);
    expect((await getJson(metricsUrl.replace('/metrics', '/healthz'), { headers: bearer(TOKEN) })).status).toBe(404);
    expect((await getJson(metricsUrl, { method: 'POST', headers: bearer(TOKEN) })).status).toBe(404);
  });

  it('shows the upstream calls of the media jobs it ran, in the GenAI conventions', async () => {
    const account = await makeAccount(orm, { coins: '100' });
    const { key } = await makeKey(orm, account.id);
    const created = await getJson(`${api.base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json', prefer: 'wait=60' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'a lighthouse', settings: { size: 128 } }),
    });
    expect([200, 201, 202]).toContain(created.status);
    let status = created.body.status as string;
    for (let i = 0; i < 120 && status !== 'succeeded' && status !== 'failed'; i++) {
      await new Promise((r) => setTimeout(r, 500));
      status = (await getJson(`${api.base}/api/v1/generations/${created.body.id}`, { headers: bearer(key) })).body.status;
    }
    expect(status).toBe('succeeded');

    const res = await fetch(metricsUrl, { headers: bearer(TOKEN) });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    // The submit and the result fetch of the demo model's provider ("local"), each observed once at least.
    const count = /^gen_ai_client_operation_duration_seconds_count\{[^}]*gen_ai_operation_name="generate_content"[^}]*gen_ai_provider_name="local"[^}]*gen_ai_request_model="image"[^}]*\} (\d+)/m.exec(text);
    expect(count, text.split('\n').filter((l) => l.startsWith('gen_ai')).join('\n')).not.toBeNull();
    expect(Number(count![1])).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/^# TYPE mas_upstream_errors_total counter/m);
    expect(text).toMatch(/^process_cpu_user_seconds_total \d/m);
    // The worker's registry is its own: no HTTP series (it serves no API).
    expect(text).not.toMatch(/^http_requests_total/m);
  });
});
