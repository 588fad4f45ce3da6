import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { AppConnectionPrincipal, KeyPrincipal } from '../../core/auth/principals.ts';
import { seedModels, validateCatalog, type ModelCatalog } from '../../core/catalog/catalog.ts';
import type { CoreDeps } from '../../core/context.ts';
import { createGeneration } from '../../core/generations/create-generation.ts';
import { cancelJob, completeJob, endJob, failJob } from '../../core/generations/end-job.ts';
import { beginJob, cancelUpstream, deleteJobResult, isFileId, restartStaleJobs, storeJobResult, submitJob } from '../../core/generations/job-steps.ts';
import { loadJob } from '../../core/generations/job-row.ts';
import { createGenerationInput } from '../../core/generations/schema.ts';
import { randomBase62 } from '../../core/ids.ts';
import { historyInput, listHistory } from '../../core/money/history.ts';
import { release, settle } from '../../core/money/holds.ts';
import { getBalance } from '../../core/money/wallet.ts';
import type { GenerationStarter, InputReader, JobWorkflowStart, MediaProvider, MediaProviderRegistry, ResultStorage } from '../../core/ports.ts';
import { TEST_CATALOG } from '../support/catalog.ts';
import { makeAccount, makeKey, openTestOrm, testDeps } from '../support/db.ts';

/**
 * Media jobs, billed (core/generations: create-generation.ts, end-job.ts, job-steps.ts), called
 * directly with a fake workflow starter and fake providers instead of Temporal: the price and
 * the hold a job takes, what each ending does to the money, and each workflow step's answers.
 * test/integration/generations.test.ts runs jobs end to end; these pin the edges the mutation
 * run (`npm run test:mutation`) found loose.
 */
let orm: MikroORM;
let base: CoreDeps;
const tag = randomBase62(8);
/** Models of this file alone (one of them is disabled below). */
const IMAGE = `test/billing-image-${tag}`;
const DISABLED = `test/billing-disabled-${tag}`;
const WITH_INPUT = `test/billing-input-${tag}`;
const ROUTED = `test/billing-routed-${tag}`;

beforeAll(async () => {
  orm = await openTestOrm();
  base = testDeps(orm);
  const image = (id: string, extra: Record<string, unknown> = {}) => ({
    id,
    name: id,
    type: 'image',
    generation_types: ['text-to-image'],
    provider: { name: 'local', model: 'image' },
    settings: { size: { type: 'enum', options: ['512', '1024'], default: '512' } },
    pricing: { base: 10, factors: { size: { '512': 1, '1024': 2.5 } } },
    deadline_seconds: 120,
    ...extra,
  });
  await seedModels(
    orm.em.fork(),
    validateCatalog({ providers: TEST_CATALOG.providers, models: [...TEST_CATALOG.models, image(IMAGE), image(DISABLED), image(WITH_INPUT, { inputs: { image: { accepts: ['image'] } } }), image(ROUTED, { provider: undefined, routes: [{ provider: 'local', model: 'image' }, { provider: 'local', model: 'image-hd' }] })] }, 50n),
  );
  await orm.em.fork().execute('update models set disabled_at = now() where id = ?', [DISABLED]);
});
afterAll(async () => {
  // No job of this file is left queued for another file's sweep to start.
  const left = await orm.em.fork().execute<{ id: string }[]>(`select id from generations where account_id in (?) and status in ('queued', 'running')`, [accounts]);
  for (const { id } of left) await cancelJob(orm.em.fork(), id);
  await orm.close();
});

/** A starter that records what it was asked to start; `fail` makes start throw. */
function fakeStarter(opts: { fail?: boolean } = {}) {
  const started: JobWorkflowStart[] = [];
  const starter: GenerationStarter = {
    start: async (job) => {
      if (opts.fail) throw new Error('Temporal is down');
      started.push(job);
      return `run-${job.jobId}`;
    },
    cancel: async () => undefined,
    state: async () => 'open' as never,
    deliverWebhook: async () => undefined,
  };
  return { starter, started };
}

const accounts: string[] = [];
async function customer(coins = '100'): Promise<KeyPrincipal> {
  const account = await makeAccount(orm, { coins });
  accounts.push(account.id);
  const key = await makeKey(orm, account.id);
  return { kind: 'api_key', accountId: account.id, keyId: key.id, paid: true, fromCache: false };
}

/** A request as the API would parse it. */
const req = (body: Record<string, unknown>) => createGenerationInput.parse(body);

const holdOf = async (jobId: string) =>
  (
    await orm.em.fork().execute<{ id: string; amount: string; status: string; metadata: Record<string, unknown>; expires_at: Date }[]>(
      'select h.id, h.amount_micro::text as amount, h.status, h.metadata, h.expires_at from holds h join generations g on g.hold_id = h.id where g.id = ?',
      [jobId],
    )
  )[0]!;

describe('accepting a job', () => {
  it('prices it at the price in force now, holds the price until past its deadline, and names the key and the model', async () => {
    const asked: unknown[] = [];
    const now = new Date();
    const catalog = { get: (em: never, id: string, o: unknown) => (asked.push(o), base.catalog.get(em, id, o as never)) } as unknown as ModelCatalog;
    const { starter, started } = fakeStarter();
    const me = await customer();
    const { generation, replayed, expected_seconds } = await createGeneration(
      { ...base, catalog, clock: () => now, generations: starter },
      orm.em.fork(),
      me,
      req({ model: IMAGE, prompt: 'a lighthouse', settings: { size: '1024' } }),
    );
    expect(replayed).toBe(false);
    // No expected duration in its catalog entry: none is told (MCP progress then sends no total).
    expect(expected_seconds).toBeNull();
    expect(asked[0]).toEqual({ at: now });
    const hold = await holdOf(generation.id);
    // (10 coins x 2.5) at 50 %: 12.5 coins.
    expect(hold.amount).toBe('12500000');
    expect(new Date(hold.expires_at).getTime()).toBe(now.getTime() + (120 + 15 * 60) * 1000);
    expect(hold.metadata).toStrictEqual({ kind: 'generation', model: IMAGE, key_id: me.keyId });
    expect(started).toEqual([expect.objectContaining({ jobId: generation.id, accountId: me.accountId, keyId: me.keyId, model: IMAGE, modelType: 'image', priceMicro: 12_500_000n })]);
    expect((await loadJob(orm.em.fork(), generation.id)).workflow_run_id).toBe(`run-${generation.id}`);
  });

  it("tells the model's expected duration from the catalog (MCP progress reports against it)", async () => {
    const me = await customer();
    const { starter } = fakeStarter();
    const { expected_seconds } = await createGeneration({ ...base, generations: starter }, orm.em.fork(), me, req({ model: 'test/timed-image', prompt: 'x' }));
    expect(expected_seconds).toBe(12);
  });

  it("an app's job names its connection in the hold, which its spend cap counts", async () => {
    const me = await customer();
    const appKey = await makeKey(orm, me.accountId);
    const connectionId = `app_billing_${randomBase62(10)}`;
    await orm.em.fork().execute(
      `insert into app_connections (id, account_id, key_id, client_id, client_name, redirect_host, spend_cap_micro) values (?, ?, ?, 'https://app.example/c', 'App', 'app.example', 20000000)`,
      [connectionId, me.accountId, appKey.id],
    );
    const app: AppConnectionPrincipal = { kind: 'app_connection', accountId: me.accountId, connectionId, keyId: appKey.id, paid: true, fromCache: false, spendCapMicro: 20_000_000n, expiresAt: null };
    const { starter } = fakeStarter();
    const { generation } = await createGeneration({ ...base, generations: starter }, orm.em.fork(), app, req({ model: IMAGE, prompt: 'x', settings: { size: '1024' } }));
    expect((await holdOf(generation.id)).metadata).toStrictEqual({ kind: 'generation', model: IMAGE, key_id: appKey.id, app_connection_id: connectionId });
    // 12.5 of the 20-coin cap is held: a second job of the same price does not fit under it.
    await expect(createGeneration({ ...base, generations: starter }, orm.em.fork(), app, req({ model: IMAGE, prompt: 'x', settings: { size: '1024' } }))).rejects.toMatchObject({
      code: 'spend_cap_reached',
    });
  });

  it('refuses, holding nothing: a paid-only model for an unpaid account (naming the model), a model whose provider is not configured, a private webhook URL', async () => {
    const { starter, started } = fakeStarter();
    const me = await customer();
    const paidOnly = { get: async (em: never, id: string, o: never) => ({ ...(await base.catalog.get(em, id, o)), paid_only: true }) } as unknown as ModelCatalog;
    await expect(createGeneration({ ...base, catalog: paidOnly, generations: starter }, orm.em.fork(), { ...me, paid: false }, req({ model: IMAGE, prompt: 'x', settings: {} }))).rejects.toMatchObject({
      code: 'paid_account_required',
      param: 'model',
    });
    const noMedia: MediaProviderRegistry = { get: () => undefined };
    await expect(createGeneration({ ...base, media: noMedia, generations: starter }, orm.em.fork(), me, req({ model: IMAGE, prompt: 'x', settings: {} }))).rejects.toMatchObject({
      code: 'unavailable',
      reason: 'provider_unavailable',
    });
    await expect(
      createGeneration({ ...base, generations: starter }, orm.em.fork(), me, req({ model: IMAGE, prompt: 'x', settings: {}, webhook_url: 'http://10.1.2.3/hook' })),
    ).rejects.toMatchObject({ code: 'invalid_request', param: 'webhook_url', reason: 'invalid_url' });
    expect(started).toHaveLength(0);
    expect(await getBalance(orm.em.fork(), me.accountId)).toMatchObject({ purchased: 100_000_000n, held: 0n });
  });

  it("takes the account's own uploaded file as an input, and no other account's", async () => {
    const { starter } = fakeStarter();
    const me = await customer();
    const other = await customer();
    const file = `file_${randomBase62(16)}`;
    await orm.em.fork().execute(`insert into files (id, account_id, filename, bytes, mime_type, type, storage_key) values (?, ?, 'a.png', 3, 'image/png', 'image', 'uploads/a.png')`, [file, me.accountId]);
    const input = req({ model: WITH_INPUT, prompt: 'x', settings: {}, inputs: { image: file } });
    const { generation } = await createGeneration({ ...base, generations: starter }, orm.em.fork(), me, input);
    expect(generation.status).toBe('queued');
    await expect(createGeneration({ ...base, generations: starter }, orm.em.fork(), other, input)).rejects.toMatchObject({ reason: 'file_not_found' });
  });

  it('a job whose workflow cannot be started: failed, refunded in full, its idempotency key free again, and 503', async () => {
    const me = await customer();
    const key = `idem-${randomBase62(10)}`;
    const input = req({ model: IMAGE, prompt: 'x', settings: {}, idempotency_key: key });
    const down = fakeStarter({ fail: true });
    await expect(createGeneration({ ...base, generations: down.starter }, orm.em.fork(), me, input)).rejects.toMatchObject({ code: 'unavailable', reason: 'job_runner_unavailable' });
    const [failed] = await orm.em.fork().execute<{ id: string; status: string; error: { code: string } }[]>('select id, status, error from generations where account_id = ?', [me.accountId]);
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'start_failed' } });
    expect(await getBalance(orm.em.fork(), me.accountId)).toMatchObject({ purchased: 100_000_000n, held: 0n });
    const up = fakeStarter();
    const retried = await createGeneration({ ...base, generations: up.starter }, orm.em.fork(), me, input);
    expect(retried.replayed).toBe(false);
    expect(retried.generation.id).not.toBe(failed!.id);
    expect((await createGeneration({ ...base, generations: up.starter }, orm.em.fork(), me, input)).replayed).toBe(true);
  });

  it('the same without an idempotency key: failed, refunded, and 503', async () => {
    const me = await customer();
    const down = fakeStarter({ fail: true });
    await expect(createGeneration({ ...base, generations: down.starter }, orm.em.fork(), me, req({ model: IMAGE, prompt: 'x', settings: {} }))).rejects.toMatchObject({
      code: 'unavailable',
      reason: 'job_runner_unavailable',
    });
    expect(await getBalance(orm.em.fork(), me.accountId)).toMatchObject({ purchased: 100_000_000n, held: 0n });
  });
});

/** A job accepted (queued, its price held) through createGeneration with a recording starter. */
async function acceptedJob(model = IMAGE, extra: Record<string, unknown> = {}) {
  const me = await customer();
  const { starter } = fakeStarter();
  const { generation } = await createGeneration({ ...base, generations: starter }, orm.em.fork(), me, req({ model, prompt: 'x', settings: {}, ...extra }));
  return { me, id: generation.id };
}

/** A job its workflow began (running, its hold open): the only kind a step may send upstream (core/generations/upstream.ts). */
async function runningJob(model = IMAGE, extra: Record<string, unknown> = {}) {
  const job = await acceptedJob(model, extra);
  await orm.em.fork().execute(`update generations set status = 'running', started_at = now() where id = ?`, [job.id]);
  return job;
}

function fakeStorage() {
  const deleted: string[] = [];
  const put: string[] = [];
  const storage = {
    put: async (key: string) => void put.push(key),
    delete: async (key: string) => void deleted.push(key),
  } as unknown as ResultStorage;
  return { storage, deleted, put };
}

describe('the endings of a job', () => {
  it('completing a job whose hold the sweep released: failed as reservation_expired, nothing charged, its output deleted', async () => {
    const { me, id } = await acceptedJob();
    await release(orm.em.fork(), (await loadJob(orm.em.fork(), id)).hold_id);
    const { storage, deleted } = fakeStorage();
    const ending = await completeJob({ storage, config: { resultRetentionSeconds: 3600 } }, orm.em.fork(), id, { key: `generations/${id}.png`, mime_type: 'image/png', bytes: 3, filename: `${id}.png` });
    expect(ending).toEqual({ status: 'failed', error: { message: expect.any(String), code: 'reservation_expired' } });
    expect(deleted).toEqual([`generations/${id}.png`]);
    expect(await loadJob(orm.em.fork(), id)).toMatchObject({ status: 'failed', cost_micro: '0' });
    expect(await getBalance(orm.em.fork(), me.accountId)).toMatchObject({ purchased: 100_000_000n, held: 0n });
  });

  it('a job that already ended answers with how it ended, and its new output is deleted', async () => {
    const { id } = await acceptedJob();
    expect(await failJob(orm.em.fork(), id, { message: 'boom', code: 'provider_failed' })).toEqual({ status: 'failed', error: { message: 'boom', code: 'provider_failed' } });
    const { storage, deleted } = fakeStorage();
    expect(await completeJob({ storage, config: { resultRetentionSeconds: 3600 } }, orm.em.fork(), id, { key: 'generations/late.png', mime_type: 'image/png', bytes: 1, filename: 'late.png' })).toEqual({
      status: 'failed',
      error: { message: 'boom', code: 'provider_failed' },
    });
    expect(deleted).toEqual(['generations/late.png']);
    expect(await failJob(orm.em.fork(), id, { message: 'again', code: 'other' })).toEqual({ status: 'failed', error: { message: 'boom', code: 'provider_failed' } });
  });

  it('cancel: canceled now once, refunded in full; a second cancel is told how it ended', async () => {
    const { me, id } = await acceptedJob();
    expect(await cancelJob(orm.em.fork(), id)).toEqual({ ending: { status: 'canceled', error: null }, canceledNow: true });
    expect(await cancelJob(orm.em.fork(), id)).toEqual({ ending: { status: 'canceled', error: null }, canceledNow: false });
    expect(await getBalance(orm.em.fork(), me.accountId)).toMatchObject({ purchased: 100_000_000n, held: 0n });
    const history = await listHistory(orm.em.fork(), me.accountId, historyInput.parse({ limit: 10 }));
    expect(history.data.map((e: { description: string }) => e.description)).toContain('Refund: generation canceled');
  });

  it('the history names a refund of the unused part of a succeeded job', async () => {
    const { me, id } = await acceptedJob();
    const job = await loadJob(orm.em.fork(), id);
    await settle(orm.em.fork(), job.hold_id, 4_000_000n);
    await orm.em.fork().execute(`update generations set status = 'succeeded', cost_micro = 4000000, completed_at = now() where id = ?`, [id]);
    const history = await listHistory(orm.em.fork(), me.accountId, historyInput.parse({ limit: 10 }));
    expect(history.data.map((e: { description: string }) => e.description)).toContain('Refund: unused part of the price');
  });

  it('an unknown job is not found', async () => {
    await expect(endJob(orm.em.fork(), 'gen_unknown', async () => 'x')).rejects.toMatchObject({ code: 'not_found', reason: 'generation_not_found' });
  });
});

describe("the workflow's steps", () => {
  /** A media registry whose `local` provider records what it is given. */
  function fakeMedia() {
    const seen: { inputs?: InputReader; spec?: unknown } = {};
    const provider: MediaProvider = {
      submit: async (spec, inputs) => {
        seen.spec = spec;
        seen.inputs = inputs;
        return 'handle-1';
      },
      poll: async () => ({ status: 'running' }) as never,
      fetchResult: async () => ({ bytes: new Uint8Array([1, 2, 3, 4]), mimeType: 'image/png', extension: 'png' }),
    };
    return { media: { get: (name: string) => (name === 'local' ? provider : undefined) } as MediaProviderRegistry, seen };
  }

  it('beginJob: a queued job starts running with its deadline; a job of a disabled model still runs; an ended job is ended', async () => {
    const { id } = await acceptedJob(IMAGE, { webhook_url: 'http://127.0.0.1:9/hook' });
    // The routes in the order the workflow tries them: the model's one provider here.
    expect(await beginJob(base, orm.em.fork(), id)).toEqual({ ended: false, missingModel: false, deadlineSeconds: 120, webhook: true, routes: ['local/image'] });
    expect((await loadJob(orm.em.fork(), id)).status).toBe('running');

    const { id: other } = await acceptedJob();
    await orm.em.fork().execute('update generations set model_id = ? where id = ?', [DISABLED, other]);
    expect(await beginJob(base, orm.em.fork(), other)).toEqual({ ended: false, missingModel: false, deadlineSeconds: 120, webhook: false, routes: ['local/image'] });

    await cancelJob(orm.em.fork(), other);
    expect(await beginJob(base, orm.em.fork(), other)).toEqual({ ended: true, status: 'canceled', error: null });
  });

  it('beginJob: the first retry wait of the job steps is the wiring one when it sets one (tests), and absent otherwise', async () => {
    // Absent, the workflow keeps its own 1 s; the value it gets is kept in the run's history.
    const started = { ended: false, missingModel: false, deadlineSeconds: 120, webhook: false, routes: ['local/image'] };
    const { id } = await acceptedJob();
    expect(await beginJob({ catalog: base.catalog, config: { jobStepRetryInitialMs: 100 } }, orm.em.fork(), id)).toStrictEqual({ ...started, stepRetryInitialMs: 100 });
    const { id: unset } = await acceptedJob();
    expect(await beginJob({ catalog: base.catalog, config: {} }, orm.em.fork(), unset)).toStrictEqual(started);
    const { id: unwired } = await acceptedJob();
    expect(await beginJob({ catalog: base.catalog }, orm.em.fork(), unwired)).toStrictEqual(started);
  });

  it('beginJob: a job whose model is gone, or is a text model, runs as missing its model', async () => {
    const { id } = await acceptedJob();
    await orm.em.fork().execute('update generations set model_id = ? where id = ?', ['test/ok', id]);
    expect(await beginJob(base, orm.em.fork(), id)).toEqual({ ended: false, missingModel: true, deadlineSeconds: 0, webhook: false, routes: [] });
    const { id: gone } = await acceptedJob();
    await orm.em.fork().execute('update generations set model_id = ? where id = ?', ['test/no-such-model', gone]);
    expect(await beginJob(base, orm.em.fork(), gone)).toMatchObject({ ended: false, missingModel: true });
  });

  it("submitJob: sends the spec to the model's provider, a disabled model's too; uploaded files go as signed links for 6 hours, URLs as they are", async () => {
    const { media, seen } = fakeMedia();
    const now = new Date();
    const { id } = await runningJob();
    await orm.em.fork().execute('update generations set model_id = ? where id = ?', [DISABLED, id]);
    expect(await submitJob({ ...base, media, clock: () => now }, orm.em.fork(), id)).toEqual({ provider: 'local', handle: 'handle-1' });
    expect(seen.spec).toMatchObject({ jobId: id, model: 'image', type: 'image', prompt: 'x' });
    expect(seen.inputs!.url('https://example.com/a.png')).toBe('https://example.com/a.png');
    const link = new URL(seen.inputs!.url('file_abc123'));
    const signed = new URL(base.signer.sign('file_abc123', new Date(now.getTime() + 6 * 3_600_000), 'file'));
    expect(link.href).toBe(signed.href);
  });

  it("submitJob on a route: the route's model, an idempotency key per job and route; a route gone from the catalog or a provider not configured is route_unavailable", async () => {
    const { media, seen } = fakeMedia();
    const { id } = await runningJob(ROUTED);
    expect(await submitJob({ ...base, media }, orm.em.fork(), id, { route: 'local/image-hd', fallback: false })).toEqual({ provider: 'local', handle: 'handle-1' });
    expect(seen.spec).toMatchObject({ jobId: `${id}:local/image-hd`, model: 'image-hd' });
    expect(await orm.em.fork().execute('select provider, route_model, upstream_handle from generations where id = ?', [id])).toEqual([
      { provider: 'local', route_model: 'image-hd', upstream_handle: 'handle-1' },
    ]);
    expect(await submitJob({ ...base, media }, orm.em.fork(), id, { route: 'local/image', fallback: true })).toEqual({ provider: 'local', handle: 'handle-1' });
    expect(seen.spec).toMatchObject({ jobId: `${id}:local/image`, model: 'image' });
    // Without a route (a workflow started before routes): the first route, keyed by the job alone.
    await submitJob({ ...base, media }, orm.em.fork(), id);
    expect(seen.spec).toMatchObject({ jobId: id, model: 'image' });
    for (const [deps, route] of [
      [{ ...base, media }, 'local/gone'],
      [{ ...base, media: { get: () => undefined } }, 'local/image'],
    ] as const) {
      await expect(submitJob(deps, orm.em.fork(), id, { route, fallback: true })).rejects.toMatchObject({ kind: 'refused', code: 'route_unavailable' });
    }
  });

  it('submitJob: a job of a text model is refused; a provider not configured is unavailable', async () => {
    const { media } = fakeMedia();
    const { id } = await runningJob();
    await orm.em.fork().execute('update generations set model_id = ? where id = ?', ['test/ok', id]);
    await expect(submitJob({ ...base, media }, orm.em.fork(), id)).rejects.toMatchObject({ code: 'invalid_request', reason: 'wrong_model_type' });
    const { id: other } = await runningJob();
    await expect(submitJob({ ...base, media: { get: () => undefined } }, orm.em.fork(), other)).rejects.toMatchObject({ code: 'unavailable', reason: 'provider_unavailable' });
  });

  it("cancelUpstream: asks the job's provider to stop it, where the provider can", async () => {
    const { media } = fakeMedia();
    const canceled: string[] = [];
    const provider = media.get('local')!;
    provider.cancel = async (handle) => void canceled.push(handle);
    await cancelUpstream({ media }, 'local', 'handle-9');
    expect(canceled).toEqual(['handle-9']);
    await expect(cancelUpstream({ media: { get: () => undefined } }, 'local', 'handle-9')).rejects.toMatchObject({ code: 'unavailable', reason: 'provider_unavailable' });
  });

  it('storeJobResult: stored under generations/<job>.<extension>, with its type and size', async () => {
    const { media } = fakeMedia();
    const { storage, put } = fakeStorage();
    const { id } = await runningJob();
    expect(await storeJobResult({ ...base, media, storage }, orm.em.fork(), id, 'local', 'handle-1')).toEqual({ key: `generations/${id}.png`, mime_type: 'image/png', bytes: 4, filename: `${id}.png` });
    expect(put).toEqual([`generations/${id}.png`]);
  });

  it('deleteJobResult: deletes a stored result once; a job with none, or one already deleted, is left alone', async () => {
    const { id } = await acceptedJob();
    const { storage, deleted } = fakeStorage();
    await deleteJobResult({ storage }, orm.em.fork(), id);
    expect(deleted).toEqual([]);
    await orm.em.fork().execute(`update generations set output = ?::jsonb where id = ?`, [JSON.stringify({ key: 'generations/r.png', mime_type: 'image/png', bytes: 1, filename: 'r.png' }), id]);
    await deleteJobResult({ storage }, orm.em.fork(), id);
    await deleteJobResult({ storage }, orm.em.fork(), id);
    expect(deleted).toEqual(['generations/r.png']);
  });

  it('restartStaleJobs: starts jobs left queued, naming their model type, a disabled model and a vanished one too', async () => {
    const a = await acceptedJob();
    const b = await acceptedJob();
    const c = await acceptedJob();
    await orm.em.fork().execute('update generations set model_id = ? where id = ?', [DISABLED, b.id]);
    await orm.em.fork().execute('update generations set model_id = ? where id = ?', ['test/vanished', c.id]);
    // Older than any other file's queued job, so among the first the sweep takes.
    await orm.em.fork().execute(`update generations set created_at = now() - interval '10 days' where id in (?, ?, ?)`, [a.id, b.id, c.id]);
    const mine = new Set([a.id, b.id, c.id]);
    const started: JobWorkflowStart[] = [];
    // Other files' stale jobs may be met too: recorded here only, their rows left as they are (no run id).
    const starter = { ...fakeStarter().starter, start: async (job: JobWorkflowStart) => void started.push(job) };
    await restartStaleJobs({ catalog: base.catalog, generations: starter }, orm.em.fork());
    const types = Object.fromEntries(started.filter((s) => mine.has(s.jobId)).map((s) => [s.jobId, s.modelType]));
    expect(types[a.id]).toBe('image');
    expect(types[b.id]).toBe('image');
    expect(types[c.id]).toBe('unknown');
  });

  it('isFileId: a file id exactly, nothing around it', () => {
    expect(isFileId('file_abc123')).toBe(true);
    expect(isFileId(`file_${'a'.repeat(64)}`)).toBe(true);
    for (const not of ['file_', 'xfile_abc', 'file_abc!', 'file_abc/../x', `file_${'a'.repeat(65)}`, 'file_a-b', 'https://x/file_abc']) expect(isFileId(not), not).toBe(false);
  });
});
