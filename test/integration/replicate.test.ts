import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Server } from 'node:http';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createRestApp } from '../../adapters/rest/app.ts';
import { temporalGenerationStarter } from '../../config/temporal.ts';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { startWorker, type RunningWorker } from '../../workflows/worker.ts';
import { startFakeReplicate, type FakeReplicate } from '../fakes/replicate-upstream.ts';
import { TEST_CATALOG } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';

/** A real asynchronous upstream: the Replicate-style adapter against a fake predictions server. */
let orm: MikroORM;
let fake: FakeReplicate;
let connection: Connection;
let worker: RunningWorker;
let server: Server;
let base: string;
const taskQueue = `test-replicate-${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), validateCatalog(TEST_CATALOG, 50n));
  fake = await startFakeReplicate();
  connection = await Connection.connect({ address: inject('temporalAddress') });
  const deps = testDeps(orm, {
    storageDir: await fs.mkdtemp(path.join(os.tmpdir(), 'mas-replicate-')),
    generations: temporalGenerationStarter(new Client({ connection }), { taskQueue }),
    mediaProviders: { 'replicate-fake': { kind: 'replicate', base_url: fake.url, api_key_env: 'FAKE_REPLICATE_KEY', timeout_seconds: 5 } },
  });
  worker = await startWorker({ deps, address: inject('temporalAddress'), namespace: 'default', logger: silentLogger, taskQueue });
  const app = createRestApp({ deps, logger: silentLogger, publicBaseUrl: 'http://localhost' });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(async () => {
  await worker.shutdown();
  await connection.close();
  await new Promise((r) => server.close(r));
  await fake.close();
  await orm.close();
});

async function run(model: string, settings: Record<string, unknown> = {}) {
  const account = await makeAccount(orm, { coins: '20' });
  const { key } = await makeKey(orm, account.id);
  const res = await getJson(`${base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'a red kite', settings }),
  });
  expect(res.status).toBe(202);
  return { account, key, id: res.body.id as string };
}

async function ended(key: string, id: string) {
  let job: any;
  await vi.waitFor(async () => {
    job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
    expect(['succeeded', 'failed', 'canceled']).toContain(job.status);
  }, { timeout: 30_000, interval: 100 });
  return job;
}

describe('Replicate-style upstream', () => {
  it('submits, polls through starting and processing, copies the output, settles', async () => {
    const { account, key, id } = await run('test/replicate-ok', { steps: 4 });
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', output: { mime_type: 'image/png' } });
    const prediction = [...fake.predictions.values()].find((p) => p.input.prompt === 'a red kite' && p.version === 'ok');
    expect(prediction?.input).toMatchObject({ prompt: 'a red kite', steps: 4 });
    const file = await fetch(`${base}${new URL(job.output.url).pathname}${new URL(job.output.url).search}`);
    expect(Buffer.from(await file.arrayBuffer()).subarray(1, 4).toString()).toBe('PNG');
    expect(Number(await capturedFor(orm, id))).toBe(job.cost_coins * 1e6);
    await expectSettledWallet(orm, account.id);
  });

  it('a failed prediction: failed, refunded in full, with the upstream reason', async () => {
    const { account, key, id } = await run('test/replicate-fail');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'provider_failed' } });
    expect(job.error.message).toContain('NSFW content detected');
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
  });

  it('cancel reaches the upstream', async () => {
    const { account, key, id } = await run('test/replicate-slow');
    await vi.waitFor(async () => expect((await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body.status).toBe('running'));
    await vi.waitFor(() => expect([...fake.predictions.values()].some((p) => p.version === 'slow' && p.status === 'processing')).toBe(true));
    const canceled = await getJson(`${base}/api/v1/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(canceled.body.status).toBe('canceled');
    await vi.waitFor(() => expect(fake.cancels.length).toBeGreaterThan(0), { timeout: 15_000 });
    expect([...fake.predictions.values()].find((p) => p.id === fake.cancels[0])?.status).toBe('canceled');
    await expectSettledWallet(orm, account.id);
  });
});
