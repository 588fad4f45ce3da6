import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { startFakeFal, type FakeFal } from '../fakes/fal-upstream.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';

/** Jobs on fal models through the REST API, a real Temporal worker and the fake fal queue. */
let h: JobHarness;
let orm: MikroORM;
let fake: FakeFal;
let base: string;

const falModel = (behaviour: string, upstream = `fal-ai/fake-${behaviour}`) => ({
  id: `test/fal-${behaviour}`,
  name: `fal upstream (${behaviour})`,
  type: 'image',
  generation_types: ['text-to-image'],
  provider: { name: 'fal-fake', model: upstream },
  settings: { num_images: { type: 'integer', min: 1, max: 8, default: 1 } },
  inputs: { image_url: { accepts: ['image'] } },
  pricing: { base: 6 },
  deadline_seconds: 60,
});

beforeAll(async () => {
  fake = await startFakeFal();
  const fal = { kind: 'fal', base_url: fake.url, api_key_env: 'FAKE_FAL_KEY', timeout_seconds: 5 } as const;
  h = await startJobHarness({ mediaProviders: { 'fal-fake': fal } });
  ({ orm, base } = h);
  const catalog = validateCatalog(
    { providers: { 'fal-fake': fal }, models: [falModel('image', 'fal-ai/fake-flux/image'), falModel('fail'), falModel('slow'), falModel('invalid'), falModel('busy-once')] },
    50n,
  );
  await seedModels(orm.em.fork(), catalog);
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
    body: JSON.stringify({ model, prompt: `a red kite ${Math.random()}`, settings }),
  });
  expect(res.status).toBe(202);
  return { account, key, id: res.body.id as string };
}

async function ended(key: string, id: string) {
  let job: any;
  await vi.waitFor(
    async () => {
      job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
      expect(['succeeded', 'failed', 'canceled']).toContain(job.status);
    },
    { timeout: 30_000, interval: 100 },
  );
  return job;
}

/** How many ledger entries of each kind the job's reference has. */
async function entries(reference: string): Promise<Record<string, number>> {
  const rows = await orm.em.fork().execute<{ kind: string; n: string }[]>(`select kind, count(*)::text as n from ledger_entries where reference = ? group by kind`, [reference]);
  return Object.fromEntries(rows.map((r) => [r.kind, Number(r.n)]));
}

describe('fal upstream, end to end', () => {
  it('a job on a fal model (an id with a subpath) succeeds, its PNG stored, charged once', async () => {
    const { account, key, id } = await run('test/fal-image', { num_images: 2 });
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', output: { mime_type: 'image/png' } });
    const request = [...fake.requests.values()].find((r) => r.input.prompt === job.prompt);
    expect(request).toMatchObject({ model: 'fal-ai/fake-flux/image', app: 'fal-ai/fake-flux', state: 'COMPLETED', input: { num_images: 2 } });
    const file = await fetch(`${base}${new URL(job.output.url).pathname}${new URL(job.output.url).search}`);
    expect(Buffer.from(await file.arrayBuffer()).subarray(1, 4).toString()).toBe('PNG');
    expect(Number(await capturedFor(orm, id))).toBe(job.cost_coins * 1e6);
    expect((await entries(id)).capture).toBe(1);
    await expectSettledWallet(orm, account.id);
  });

  it('a job whose upstream fails: failed in our words, refunded once', async () => {
    const { account, key, id } = await run('test/fal-fail');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'provider_failed', message: 'The provider failed to make the result. Nothing was charged.' } });
    expect(await capturedFor(orm, id)).toBe(0n);
    expect((await entries(id)).capture).toBeUndefined();
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
  });

  it('a 422 on submit fails the job at once (no retries), naming the setting, refunded', async () => {
    const before = fake.calls.filter((c) => c.path === '/fal-ai/fake-invalid').length;
    const started = Date.now();
    const { account, key, id } = await run('test/fal-invalid');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'invalid_input' } });
    expect(job.error.message).toBe('The provider refused the input: settings.num_images is out of the range the provider accepts. Nothing was charged.');
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(fake.calls.filter((c) => c.path === '/fal-ai/fake-invalid').length - before).toBe(1);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
  });

  it('a 429 with Retry-After: the submit is retried no sooner than asked, then the job succeeds, charged once', async () => {
    const { account, key, id } = await run('test/fal-busy-once');
    const job = await ended(key, id);
    expect(job.status).toBe('succeeded');
    const submits = fake.calls.filter((c) => c.method === 'POST' && c.path === '/fal-ai/fake-busy-once');
    expect(submits).toHaveLength(2);
    // Temporal's own first retry would come after 1 s; fal asked for 3.
    expect(submits[1]!.at - submits[0]!.at).toBeGreaterThanOrEqual(2_900);
    expect((await entries(id)).capture).toBe(1);
    await expectSettledWallet(orm, account.id);
  });

  it('cancel through the API calls the fal cancel endpoint exactly once', async () => {
    const { account, key, id } = await run('test/fal-slow');
    let requestId = '';
    await vi.waitFor(
      () => {
        const r = [...fake.requests.values()].find((x) => x.model === 'fal-ai/fake-slow' && x.state === 'IN_PROGRESS' && !fake.cancels.includes(x.id));
        expect(r).toBeDefined();
        requestId = r!.id;
      },
      { timeout: 15_000 },
    );
    const canceled = await getJson(`${base}/api/v1/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(canceled.body.status).toBe('canceled');
    await vi.waitFor(() => expect(fake.cancels).toContain(requestId), { timeout: 15_000 });
    // The workflow closes; nothing calls cancel a second time.
    await new Promise((r) => setTimeout(r, 2_000));
    expect(fake.cancels.filter((c) => c === requestId)).toHaveLength(1);
    expect(fake.requests.get(requestId)?.state).toBe('CANCELED');
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
  });
});
