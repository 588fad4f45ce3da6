import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { Client } from '@temporalio/client';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { recordUpstreamHandle } from '../../core/generations/upstream.ts';
import { randomBase62 } from '../../core/ids.ts';
import { releaseExpiredHolds } from '../../core/money/sweep.ts';
import { createActivities } from '../../workflows/activities.ts';
import { startFakeFal, type FakeFal } from '../fakes/fal-upstream.ts';
import { startFakeOpenAIMedia, type FakeOpenAIMedia } from '../fakes/openai-media-upstream.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';

/**
 * Cancel reaches the upstream (docs/providers.md): a job running on fal's queue or on OpenAI's
 * Videos API, canceled through the REST API or terminated in Temporal (then ended by the orphan
 * sweep), has its upstream work stopped exactly once, from the handle kept on the job's row.
 */
let h: JobHarness;
let orm: MikroORM;
let fal: FakeFal;
let openai: FakeOpenAIMedia;
let base: string;
let client: Client;
const tag = randomBase62(6).toLowerCase();
const FAL = `test/cancel-fal-${tag}`;
const VIDEO = `test/cancel-sora-${tag}`;

beforeAll(async () => {
  fal = await startFakeFal();
  openai = await startFakeOpenAIMedia();
  const providers = {
    'fal-fake': { kind: 'fal', base_url: fal.url, api_key_env: 'FAKE_FAL_KEY', timeout_seconds: 5 },
    'openai-fake': { kind: 'openai', base_url: openai.url, api_key_env: 'FAKE_OPENAI_KEY', timeout_seconds: 5, max_result_mb: 16 },
  } as const;
  h = await startJobHarness({ mediaProviders: providers });
  ({ orm, base } = h);
  client = new Client({ connection: h.connection });
  const catalog = validateCatalog(
    {
      providers,
      models: [
        {
          id: FAL,
          name: 'fal, never finishing',
          type: 'image',
          generation_types: ['text-to-image'],
          provider: { name: 'fal-fake', model: `fal-ai/fake-slow-${tag}/slow` },
          pricing: { base: 6 },
          deadline_seconds: 300,
        },
        {
          id: `${FAL}-short`,
          name: 'fal, never finishing, 2 s deadline',
          type: 'image',
          generation_types: ['text-to-image'],
          provider: { name: 'fal-fake', model: `fal-ai/fake-slow-${tag}/slow` },
          pricing: { base: 6 },
          deadline_seconds: 2,
        },
        {
          id: VIDEO,
          name: 'Sora 2 (mock)',
          type: 'video',
          generation_types: ['text-to-video'],
          provider: { name: 'openai-fake', model: 'sora-2' },
          settings: { seconds: { type: 'enum', options: [4, 8, 12], default: 4 } },
          pricing: { base: 0, per_unit: { seconds: 1 } },
          deadline_seconds: 300,
        },
      ],
    },
    50n,
  );
  await seedModels(orm.em.fork(), catalog);
});
afterAll(async () => {
  await h?.close();
  await fal?.close();
  await openai?.close();
});

/** The upstream's id of a job once the upstream is working on it, and the count of cancels it got so far. */
const upstreams = {
  fal: {
    model: FAL,
    prompt: () => `a slow kite ${randomBase62(8)}`,
    running: (prompt: string) => [...fal.requests.values()].find((r) => r.input.prompt === prompt && r.state === 'IN_PROGRESS')?.id,
    cancels: (upstreamId: string) => fal.cancels.filter((c) => c === upstreamId).length,
  },
  'OpenAI video': {
    model: VIDEO,
    prompt: () => `a slow film [video-slow] ${randomBase62(8)}`,
    running: (prompt: string) => [...openai.videos.values()].find((v) => v.prompt === prompt && v.status === 'in_progress')?.id,
    cancels: (upstreamId: string) => openai.deletes.filter((d) => d === upstreamId).length,
  },
} as const;

async function started(upstream: Pick<(typeof upstreams)[keyof typeof upstreams], 'model' | 'prompt' | 'running'>) {
  const account = await makeAccount(orm, { coins: '20' });
  const { key } = await makeKey(orm, account.id);
  const prompt = upstream.prompt();
  const res = await getJson(`${base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: upstream.model, prompt }),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  const id = res.body.id as string;
  let upstreamId = '';
  await vi.waitFor(() => expect((upstreamId = upstream.running(prompt) ?? '')).not.toBe(''), { timeout: 20_000, interval: 100 });
  // The handle is on the job's row before the workflow polls it.
  const [row] = await orm.em.fork().execute<{ upstream_handle: string | null }[]>('select upstream_handle from generations where id = ?', [id]);
  expect(row!.upstream_handle).toContain(upstreamId);
  return { account, key, id, upstreamId, prompt };
}

/** Refunded once: each reservation entry released, nothing captured, the wallet whole. */
async function refundedOnce(accountId: string, id: string) {
  const rows = await orm.em.fork().execute<{ kind: string; n: string }[]>(`select kind, count(*)::text as n from ledger_entries where reference = ? group by kind`, [id]);
  const entries = Object.fromEntries(rows.map((r) => [r.kind, Number(r.n)]));
  expect(entries.capture).toBeUndefined();
  expect(entries.reservation).toBeGreaterThan(0);
  expect(entries.release).toBe(entries.reservation);
  expect((await expectSettledWallet(orm, accountId)).balance.purchased).toBe(20_000_000n);
}

/** Waits until the job's workflow has closed, and answers how (CANCELLED, TERMINATED, …). */
async function closed(id: string): Promise<string> {
  const handle = client.workflow.getHandle(id);
  await handle.result().catch(() => undefined);
  return (await handle.describe()).status.name;
}

describe.each(Object.entries(upstreams))('cancel reaches %s', (_name, upstream) => {
  it('a cancel through the REST API calls the upstream cancel exactly once, and refunds once', async () => {
    const { account, key, id, upstreamId } = await started(upstream);
    const canceled = await getJson(`${base}/api/v1/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(canceled.body).toMatchObject({ status: 'canceled', cost_coins: 0 });
    expect(canceled.body).not.toHaveProperty('upstream_handle');
    expect(await closed(id)).toBe('CANCELLED');
    // The API asked (from the row) and the workflow's cancel found it asked: one call.
    expect(upstream.cancels(upstreamId)).toBe(1);
    await refundedOnce(account.id, id);
  });

  it('a cancel request from Temporal (the UI\'s Request Cancellation; the admin API\'s cancel goes this way): the workflow calls the upstream cancel once', async () => {
    const { account, key, id, upstreamId } = await started(upstream);
    await client.workflow.getHandle(id).cancel();
    expect(await closed(id)).toBe('CANCELLED');
    expect(upstream.cancels(upstreamId)).toBe(1);
    const job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
    expect(job).toMatchObject({ status: 'canceled', cost_coins: 0 });
    await refundedOnce(account.id, id);
  });

  it('a Terminate in Temporal, then the orphan sweep: the upstream cancel is called exactly once, refunded once', async () => {
    const { account, key, id, upstreamId } = await started(upstream);
    await client.workflow.getHandle(id).terminate('stuck, says the operator');
    expect(await closed(id)).toBe('TERMINATED');
    // No workflow code ran: nothing asked the upstream yet.
    expect(upstream.cancels(upstreamId)).toBe(0);
    const sweep = createActivities(h.deps).failJobsWhoseWorkflowClosed;
    expect(await sweep()).toBeGreaterThanOrEqual(1);
    expect(upstream.cancels(upstreamId)).toBe(1);
    // The next sweep finds the job ended: no second cancel, no second refund.
    await sweep();
    expect(upstream.cancels(upstreamId)).toBe(1);
    const job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'workflow_terminated' } });
    await refundedOnce(account.id, id);
  });
});

describe('a submit that lands after the cancel', () => {
  it('a handle written to a job already canceled is canceled upstream at once; the same handle again is not canceled twice', async () => {
    const { key, id, upstreamId } = await started(upstreams.fal);
    const canceled = await getJson(`${base}/api/v1/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(canceled.body.status).toBe('canceled');
    expect(await closed(id)).toBe('CANCELLED');
    expect(upstreams.fal.cancels(upstreamId)).toBe(1);
    const em = orm.em.fork();
    const route = { provider: 'fal-fake', model: `fal-ai/fake-slow-${tag}/slow` };
    const [row] = await em.execute<{ upstream_handle: string }[]>('select upstream_handle from generations where id = ?', [id]);
    // A retried submit writing the handle it wrote before: already asked, not asked again.
    await recordUpstreamHandle(h.deps, em, id, route, row!.upstream_handle);
    expect(upstreams.fal.cancels(upstreamId)).toBe(1);
    // A submit (a retry that reached fal again) whose answer comes after the cancel: its request is stopped now.
    const prompt = `a late kite ${randomBase62(8)}`;
    const late = await h.deps.media.get('fal-fake')!.submit({ jobId: id, model: route.model, type: 'image', prompt, settings: {}, inputs: {} }, { read: () => Promise.reject(new Error('no inputs')), url: (v) => v });
    const lateId = [...fal.requests.values()].find((r) => r.input.prompt === prompt)!.id;
    await recordUpstreamHandle(h.deps, em, id, route, late);
    expect(upstreams.fal.cancels(lateId)).toBe(1);
    expect(fal.requests.get(lateId)!.state).toBe('CANCELED');
  });
});

describe('a job past its deadline', () => {
  it('fails deadline_exceeded, refunded once, and its upstream request is canceled once', async () => {
    const { account, key, id, upstreamId } = await started({ ...upstreams.fal, model: `${FAL}-short` });
    expect(await closed(id)).toBe('FAILED');
    const job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
    expect(job).toMatchObject({ status: 'failed', error: { code: 'deadline_exceeded' } });
    expect(upstreams.fal.cancels(upstreamId)).toBe(1);
    await refundedOnce(account.id, id);
  });
});

describe('a job whose reservation the sweep released while it ran', () => {
  it('its next poll calls no upstream: the job fails reservation_expired, refunded once, and its upstream request is canceled once', async () => {
    const { account, key, id, upstreamId } = await started(upstreams.fal);
    // As if it had outlived its deadline and the hold's margin: the sweep (run as at a moment long past) releases its hold.
    await orm.em.fork().execute(`update holds set expires_at = '2000-01-01T00:00:00Z' where id = ? and status = 'open'`, [`hold_${id}`]);
    expect(await releaseExpiredHolds(orm.em.fork(), new Date('2000-01-01T00:00:01Z'))).toBe(1);
    const released = Date.now();
    expect(await closed(id)).toBe('FAILED');
    const job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'reservation_expired' } });
    // At most the poll already under way when the hold was released; none after it.
    const polls = fal.calls.filter((c) => c.method === 'GET' && c.path.endsWith(`/requests/${upstreamId}/status`) && c.at > released);
    expect(polls.length).toBeLessThanOrEqual(1);
    expect(upstreams.fal.cancels(upstreamId)).toBe(1);
    await refundedOnce(account.id, id);
  });
});

describe('the upstream idempotency key', () => {
  it('is one per job and route: a retried submit is the same request, another route a new one', async () => {
    const { key, id, prompt } = await started(upstreams['OpenAI video']);
    const create = openai.requests.find((r) => r.method === 'POST' && r.path === '/v1/videos' && r.form?.prompt === prompt)!;
    expect(create.headers['idempotency-key']).toBe(`${id}:openai-fake/sora-2`);
    await getJson(`${base}/api/v1/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(await closed(id)).toBe('CANCELLED');
  });
});
