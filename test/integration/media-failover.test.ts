import { readdir, readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { Client } from '@temporalio/client';
import { temporal as proto } from '@temporalio/proto';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { createContext } from '../../core/context.ts';
import { createCaller } from '../../core/router.ts';
import { randomBase62 } from '../../core/ids.ts';
import { startFakeFal, type FakeFal } from '../fakes/fal-upstream.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { expectReplays, startJobHarness, type JobHarness } from '../support/jobs.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';

/**
 * Media routes (docs/providers.md, "Media routes"): a model with several routes, through the
 * REST API, a real Temporal worker, the fake fal queue and a port where nothing listens.
 */
let h: JobHarness;
let orm: MikroORM;
let fal: FakeFal;
let base: string;
const tag = randomBase62(6).toLowerCase();

/** A port that refuses connections: a server took it and closed. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

const model = (name: string, routes: { provider: string; model: string; cost?: unknown }[], deadlineSeconds = 120) => ({
  id: `test/routes-${name}-${tag}`,
  name: `routes (${name})`,
  type: 'image',
  generation_types: ['text-to-image'],
  routes,
  settings: { num_images: { type: 'integer', min: 1, max: 4, default: 1 } },
  pricing: { base: 6, per_unit: { num_images: 2 } },
  deadline_seconds: deadlineSeconds,
});

/** The fake fal's `busy` answers 429 with Retry-After: 7, more than these models' 5-second deadline. */
const BUSY_DEADLINE_SECONDS = 5;

beforeAll(async () => {
  fal = await startFakeFal();
  const falConfig = { kind: 'fal', base_url: fal.url, api_key_env: 'FAKE_FAL_KEY', timeout_seconds: 5 } as const;
  const providers = { 'fal-fake': falConfig, 'fal-down': { ...falConfig, base_url: `http://127.0.0.1:${await closedPort()}` } };
  h = await startJobHarness({ mediaProviders: providers });
  ({ orm, base } = h);
  const catalog = validateCatalog(
    {
      providers,
      models: [
        model('failover', [
          { provider: 'fal-down', model: 'fal-ai/fake-image' },
          { provider: 'fal-fake', model: `fal-ai/fake-image-${tag}/image`, cost: { base: 1, per_unit: { num_images: 0.5 } } },
        ]),
        // A route of its own on the closed port: the failover test's refusals of fal-down/fal-ai/fake-image
        // can open that route's breaker, and an open breaker skips the route without a submit.
        model('all-down', [
          { provider: 'fal-down', model: 'fal-ai/fake-image-all-down' },
          { provider: 'fal-fake', model: 'fal-ai/fake-forbidden' },
        ]),
        model('policy', [
          { provider: 'fal-fake', model: 'fal-ai/fake-policy' },
          { provider: 'fal-fake', model: `fal-ai/fake-never-${tag}/image` },
        ]),
        model('breaker', [
          { provider: 'fal-fake', model: `fal-ai/fake-broken-${tag}/broken` },
          { provider: 'fal-fake', model: `fal-ai/fake-second-${tag}/image` },
        ]),
        model(
          'busy-first',
          [
            { provider: 'fal-fake', model: `fal-ai/fake-busy-${tag}/busy` },
            { provider: 'fal-fake', model: `fal-ai/fake-after-busy-${tag}/image` },
          ],
          BUSY_DEADLINE_SECONDS,
        ),
        model('busy-last', [{ provider: 'fal-fake', model: `fal-ai/fake-busy-last-${tag}/busy` }], BUSY_DEADLINE_SECONDS),
      ],
    },
    50n,
  );
  await seedModels(orm.em.fork(), catalog);
});
afterAll(async () => {
  await h?.close();
  await fal?.close();
});

async function run(name: string, settings: Record<string, unknown> = {}) {
  const account = await makeAccount(orm, { coins: '20' });
  const { key } = await makeKey(orm, account.id);
  const res = await getJson(`${base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: `test/routes-${name}-${tag}`, prompt: `a kite ${randomBase62(8)}`, settings }),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  return { account, key, id: res.body.id as string, price: res.body.price_coins as number };
}

async function ended(key: string, id: string) {
  let job: any;
  await vi.waitFor(
    async () => {
      job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
      expect(['succeeded', 'failed', 'canceled']).toContain(job.status);
    },
    { timeout: 60_000, interval: 200 },
  );
  return job;
}

async function entries(reference: string): Promise<Record<string, number>> {
  const rows = await orm.em.fork().execute<{ kind: string; n: string }[]>(`select kind, count(*)::text as n from ledger_entries where reference = ? group by kind`, [reference]);
  return Object.fromEntries(rows.map((r) => [r.kind, Number(r.n)]));
}

async function row(id: string) {
  const [r] = await orm.em
    .fork()
    .execute<{ provider: string | null; route_model: string | null; upstream_handle: string | null; upstream_cost_micro: string | null }[]>(
      'select provider, route_model, upstream_handle, upstream_cost_micro::text from generations where id = ?',
      [id],
    );
  return r!;
}

/** The route steps of the job's workflow, in the order its history records them: each local activity's summary. */
async function routeSteps(id: string): Promise<string[]> {
  const handle = new Client({ connection: h.connection }).workflow.getHandle(id);
  // The job's row ends inside the workflow task whose local-activity markers carry these
  // summaries; the markers reach the history when that task completes, a moment later.
  await handle.result().catch(() => undefined);
  const history = await handle.fetchHistory();
  const steps: string[] = [];
  for (const event of history.events ?? []) {
    const summary = event.userMetadata?.summary?.data;
    if (summary) steps.push(JSON.parse(Buffer.from(summary).toString()) as string);
  }
  return steps;
}

async function adminQuery(query: string): Promise<{ data?: any; errors?: { message: string }[] }> {
  const internal = createCaller(createContext(h.deps, { kind: 'internal' }));
  const { token } = await internal.admins.createToken({ name: `routes ${randomBase62(4)}`, role: 'viewer' });
  const res = await fetch(`${base}/admin/graphql`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify({ query }) });
  return (await res.json()) as { data?: any; errors?: { message: string }[] };
}

/** The patches a history recorded (its `core_patch` markers), in order. */
function patches(history: proto.api.history.v1.IHistory): string[] {
  return (history.events ?? [])
    .filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch')
    .map((e) => (JSON.parse(Buffer.from(e.markerRecordedEventAttributes!.details!['patch-data']!.payloads![0]!.data!).toString()) as { id: string }).id);
}

describe('media routes', () => {
  it('the first route refuses the connection, the second serves: charged once at the model price, the route recorded, both routes in the history', async () => {
    const { account, key, id, price } = await run('failover', { num_images: 2 });
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', cost_coins: price, output: { mime_type: 'image/png' } });
    expect(job).not.toHaveProperty('upstream_handle');
    // The model's price (6 + 2 × 2 coins at API_PRICE_PERCENT 50), whichever route served.
    expect(price).toBe(5);
    expect(await capturedFor(orm, id)).toBe(5_000_000n);
    expect(await entries(id)).toMatchObject({ capture: 1 });
    await expectSettledWallet(orm, account.id);

    const served = [...fal.requests.values()].find((r) => r.input.prompt === job.prompt)!;
    expect(served.model).toBe(`fal-ai/fake-image-${tag}/image`);
    // The route that served, its handle (fal's request), and its cost: 1 + 0.5 × 2 coins at 100 %.
    const stored = await row(id);
    expect(stored).toMatchObject({ provider: 'fal-fake', route_model: `fal-ai/fake-image-${tag}/image`, upstream_cost_micro: '2000000' });
    expect(JSON.parse(stored.upstream_handle!)).toMatchObject({ request_id: served.id });

    // The admin API shows the route and its cost; nothing shows the upstream's handle.
    const admin = await adminQuery(`{ generation(id: "${id}") { provider routeModel upstreamCostCoins costCoins } }`);
    expect(admin.data.generation).toEqual({ provider: 'fal-fake', routeModel: `fal-ai/fake-image-${tag}/image`, upstreamCostCoins: 2, costCoins: 5 });
    expect((await adminQuery(`{ generation(id: "${id}") { upstreamHandle } }`)).errors?.[0]?.message).toMatch(/upstreamHandle/);

    const steps = await routeSteps(id);
    expect(steps.filter((s) => s.startsWith('submit on route 1 of 2: fal-down/fal-ai/fake-image'))).toHaveLength(1);
    expect(steps.filter((s) => s.startsWith(`submit on route 2 of 2: fal-fake/fal-ai/fake-image-${tag}/image`))).toHaveLength(1);
    expect(steps.some((s) => s.startsWith('poll on route 2 of 2'))).toBe(true);
    expect(steps.some((s) => s.startsWith('copy the result on route 2 of 2'))).toBe(true);
    expect(steps.indexOf(`submit on route 2 of 2: fal-fake/fal-ai/fake-image-${tag}/image`)).toBeGreaterThan(steps.indexOf('submit on route 1 of 2: fal-down/fal-ai/fake-image'));
  });

  it('every route down: the job fails in our words, refunded exactly once', async () => {
    const { account, key, id } = await run('all-down');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'provider_unauthorized' } });
    expect(job.error.message).not.toContain('fal-secret');
    expect(job.error.message).toMatch(/Nothing was charged/);
    expect(await capturedFor(orm, id)).toBe(0n);
    const e = await entries(id);
    expect(e.capture).toBeUndefined();
    expect(e.release).toBe(e.reservation);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
    const steps = await routeSteps(id);
    expect(steps.filter((s) => s.startsWith('submit on route 1 of 2'))).toHaveLength(1);
    expect(steps.filter((s) => s.startsWith('submit on route 2 of 2'))).toHaveLength(1);
    expect(await row(id)).toMatchObject({ upstream_handle: null, upstream_cost_micro: null });
  });

  it('a refusal on the request (content policy) on the first route fails the job at once; the second route is never called', async () => {
    const { account, key, id } = await run('policy');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'content_policy' } });
    expect(job.error.message).not.toContain('secret-internal-detail');
    expect(fal.calls.filter((c) => c.path === '/fal-ai/fake-policy')).toHaveLength(1);
    expect(fal.calls.filter((c) => c.path.includes(`fake-never-${tag}`))).toHaveLength(0);
    expect((await routeSteps(id)).filter((s) => s.startsWith('submit on route 2'))).toHaveLength(0);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
  });

  it("a route's breaker opens after 5 failed submits (BREAKER_FAILURES): later jobs skip it and go straight to the next route", async () => {
    const broken = () => fal.calls.filter((c) => c.method === 'POST' && c.path.includes(`fake-broken-${tag}`)).length;
    // Each job gives the first route 3 attempts before falling back: 3, then 2 more open the breaker.
    for (const expected of [3, 5, 5]) {
      const { key, id } = await run('breaker');
      expect((await ended(key, id)).status).toBe('succeeded');
      expect(broken()).toBe(expected);
      // This route names no cost in the catalog: the upstream cost is unknown, not 0.
      expect(await row(id)).toMatchObject({ provider: 'fal-fake', route_model: `fal-ai/fake-second-${tag}/image`, upstream_cost_micro: null });
    }
    const health = await h.deps.routeBreakers.health();
    expect(health.find((r) => r.route === `fal-fake/fal-ai/fake-broken-${tag}/broken`)).toMatchObject({ state: 'open', recentFailures: 5 });
  });

  it("a 429 whose Retry-After ends past the job's deadline hands the job to the next route at once: one call to the busy route, served within the deadline, charged once", async () => {
    const { account, key, id, price } = await run('busy-first');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', cost_coins: price });
    expect(fal.calls.filter((c) => c.method === 'POST' && c.path.includes(`fake-busy-${tag}`))).toHaveLength(1);
    expect(new Date(job.completed_at).getTime() - new Date(job.started_at).getTime()).toBeLessThan(BUSY_DEADLINE_SECONDS * 1000);
    expect(await row(id)).toMatchObject({ provider: 'fal-fake', route_model: `fal-ai/fake-after-busy-${tag}/image` });
    expect(await entries(id)).toMatchObject({ capture: 1 });
    await expectSettledWallet(orm, account.id);
  });

  it("on the last route, a 429 whose Retry-After ends past the job's deadline fails the job at once (provider_busy), refunded, after one call", async () => {
    const { account, key, id } = await run('busy-last');
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'provider_busy', message: 'The provider stayed too busy to take the job. Nothing was charged.' } });
    expect(fal.calls.filter((c) => c.method === 'POST' && c.path.includes(`fake-busy-last-${tag}`))).toHaveLength(1);
    expect(new Date(job.completed_at).getTime() - new Date(job.started_at).getTime()).toBeLessThan(BUSY_DEADLINE_SECONDS * 1000);
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
  });

  it('replays: the runs of this file on today\'s code, runs recorded before routes (test/fixtures/histories/v2) on the one-provider path, runs on routes recorded before the deadline bounded the steps (v3), and runs of version 4 (v4: the copy a regular activity)', async () => {
    const client = new Client({ connection: h.connection });
    const ids: string[] = [];
    for await (const wf of client.workflow.list({ query: `TaskQueue = '${h.taskQueue}'` })) ids.push(wf.workflowId);
    expect(ids.length).toBeGreaterThanOrEqual(6);
    const ours = await Promise.all(ids.map(async (workflowId) => ({ workflowId, history: await client.workflow.getHandle(workflowId).fetchHistory() })));
    for (const { workflowId, history } of ours) expect(patches(history), workflowId).toEqual(['one-workflow-task']);
    await expectReplays(ours);

    // Succeeded (after a few polls), failed and canceled runs of version 2 before routes: no
    // 'routes' marker; their submit named no route. Runs like these are in flight at the deploy.
    const dir = new URL('../fixtures/histories/v2/', import.meta.url);
    const files = (await readdir(dir)).filter((f) => f.endsWith('.binpb')).sort();
    expect(files).toEqual(['canceled.binpb', 'failed.binpb', 'succeeded.binpb']);
    const old = await Promise.all(files.map(async (f) => ({ workflowId: f, history: proto.api.history.v1.History.decode(await readFile(new URL(f, dir))) })));
    for (const { workflowId, history } of old) expect(patches(history), workflowId).toEqual(['closes-with-job']);
    await expectReplays(old);

    // Succeeded (route 1 refused the connection, route 2 served), failed (every route down) and
    // canceled runs on routes recorded before the deadline bounded the steps (test/fixtures/histories/v3):
    // no 'deadline-in-steps' marker; they replay with their steps unbounded, as recorded.
    const v3 = new URL('../fixtures/histories/v3/', import.meta.url);
    const routed = (await readdir(v3)).filter((f) => f.endsWith('.binpb')).sort();
    expect(routed).toEqual(['canceled.binpb', 'failed.binpb', 'succeeded.binpb']);
    const before = await Promise.all(routed.map(async (f) => ({ workflowId: f, history: proto.api.history.v1.History.decode(await readFile(new URL(f, v3))) })));
    for (const { workflowId, history } of before) expect(patches(history), workflowId).toEqual(['closes-with-job', 'routes']);
    await expectReplays(before);

    // Succeeded (after a poll and a timer), failed (the provider failed it) and canceled (during
    // its polls) runs of version 4 (test/fixtures/histories/v4): the three patches' markers, the
    // copy a regular activity; they replay on that path, as recorded.
    const v4 = new URL('../fixtures/histories/v4/', import.meta.url);
    const four = (await readdir(v4)).filter((f) => f.endsWith('.binpb')).sort();
    expect(four).toEqual(['canceled.binpb', 'failed.binpb', 'succeeded.binpb']);
    const fours = await Promise.all(four.map(async (f) => ({ workflowId: f, history: proto.api.history.v1.History.decode(await readFile(new URL(f, v4))) })));
    for (const { workflowId, history } of fours) expect(patches(history), workflowId).toEqual(['closes-with-job', 'routes', 'deadline-in-steps']);
    const copied = fours.find((x) => x.workflowId === 'succeeded.binpb')!.history.events!.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'copyResultToStorage');
    expect(copied).toHaveLength(1);
    await expectReplays(fours);
  });
});
