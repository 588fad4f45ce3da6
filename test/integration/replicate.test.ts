import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { startFakeReplicate, type FakeReplicate } from '../fakes/replicate-upstream.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';

/** A real asynchronous upstream: the Replicate-style adapter against a fake predictions server. */
let h: JobHarness;
let orm: MikroORM;
let fake: FakeReplicate;
let base: string;

beforeAll(async () => {
  fake = await startFakeReplicate();
  h = await startJobHarness({ mediaProviders: { 'replicate-fake': { kind: 'replicate', base_url: fake.url, api_key_env: 'FAKE_REPLICATE_KEY', timeout_seconds: 5 } } });
  ({ orm, base } = h);
});
afterAll(async () => {
  await h.close();
  await fake.close();
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

  it("a failed prediction: failed, refunded in full, in our words (the upstream's reason is the operator's)", async () => {
    const { account, key, id } = await run('test/replicate-fail');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'provider_failed', message: 'The provider failed to make the result. Nothing was charged.' } });
    expect(job.error.message).not.toContain('NSFW content detected');
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
