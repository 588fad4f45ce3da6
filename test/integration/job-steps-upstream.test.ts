import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { randomBase62 } from '../../core/ids.ts';
import { releaseExpiredHolds } from '../../core/money/sweep.ts';
import { createActivities, type Activities } from '../../workflows/activities.ts';
import { startFakeReplicate, type FakeReplicate } from '../fakes/replicate-upstream.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';

/**
 * A job's provider steps (workflows/activities.ts over core/generations/job-steps.ts), called as
 * its workflow calls them, against the fake Replicate upstream, with no worker: each test drives
 * the steps itself, so that a cancel or a refund lands exactly between two of them.
 */
let h: JobHarness;
let orm: MikroORM;
let fake: FakeReplicate;
let steps: Activities;
const tag = randomBase62(6).toLowerCase();
const MODEL = `test/steps-${tag}`;
const route = (version: string, fallback = false) => ({ route: `replicate-fake/${version}`, fallback });

beforeAll(async () => {
  fake = await startFakeReplicate();
  const providers = { 'replicate-fake': { kind: 'replicate', base_url: fake.url, api_key_env: 'FAKE_REPLICATE_KEY', timeout_seconds: 5 } } as const;
  h = await startJobHarness({ mediaProviders: providers, worker: false });
  orm = h.orm;
  steps = createActivities(h.deps);
  const catalog = validateCatalog(
    {
      providers,
      models: [
        {
          id: MODEL,
          name: 'routes for the step tests',
          type: 'image',
          generation_types: ['text-to-image'],
          routes: ['broken', 'ok', 'held', 'busy'].map((model) => ({ provider: 'replicate-fake', model })),
          pricing: { base: 6 },
          deadline_seconds: 300,
        },
      ],
    },
    50n,
  );
  await seedModels(orm.em.fork(), catalog);
});
afterAll(async () => {
  // No worker ran these jobs' workflows: they end here (each job already ended), so none stays open.
  if (h) {
    const client = new Client({ connection: h.connection });
    for await (const wf of client.workflow.list({ query: `TaskQueue = '${h.taskQueue}' AND ExecutionStatus = 'Running'` })) {
      await client.workflow.getHandle(wf.workflowId).terminate('test over').catch(() => undefined);
    }
  }
  await h?.close();
  await fake?.close();
});

/** A job accepted through the REST API and marked running by its first step, as its workflow would. */
async function runningJob() {
  const account = await makeAccount(orm, { coins: '20' });
  const { key } = await makeKey(orm, account.id);
  const prompt = `a kite ${randomBase62(8)}`;
  const res = await getJson(`${h.base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt }),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  const id = res.body.id as string;
  expect(await steps.markJobRunning(id)).toMatchObject({ ended: false });
  return { account, key, id, prompt };
}

const predictionsOf = (prompt: string) => [...fake.predictions.values()].filter((p) => p.input.prompt === prompt);

async function cancel(key: string, id: string) {
  const res = await getJson(`${h.base}/api/v1/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) });
  expect(res.body.status).toBe('canceled');
}

/** The step's failure as Temporal takes it: its type, whether it is retried, and after how long. */
async function stepFailure(step: Promise<unknown>): Promise<{ type: string | undefined; nonRetryable: boolean; nextRetryDelay: unknown; details: unknown }> {
  const err = await step.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  const f = err as ApplicationFailure;
  return { type: f.type ?? undefined, nonRetryable: f.nonRetryable === true, nextRetryDelay: f.nextRetryDelay, details: f.details?.[0] };
}

describe('a cancel between retries', () => {
  it("the next route's submit, after the job was canceled through the API, starts no prediction and fails job_ended, not retried, no other route", async () => {
    const { account, key, id, prompt } = await runningJob();
    // Route 1 fails (a 5xx, retried by Temporal); the customer cancels before the next attempt.
    expect((await stepFailure(steps.submitJobToProvider(id, route('broken', true), Date.now() + 300_000))).type).toBe('provider_unavailable');
    await cancel(key, id);
    const before = fake.creates.length;
    const refused = await stepFailure(steps.submitJobToProvider(id, route('ok'), Date.now() + 300_000));
    expect(refused).toMatchObject({ type: 'job_ended', nonRetryable: true, details: { jobOver: true } });
    expect(fake.creates.length).toBe(before);
    expect(predictionsOf(prompt)).toEqual([]);
    await expectSettledWallet(orm, account.id);
  });

  it('a submit already on its way when the job is canceled: its prediction is canceled upstream as soon as it lands', async () => {
    const { key, id, prompt } = await runningJob();
    const submitted = steps.submitJobToProvider(id, route('held'), Date.now() + 300_000);
    await vi.waitFor(() => expect(fake.creates).toContain('held'), { timeout: 5_000, interval: 20 });
    // The API's own cancel finds no handle yet: the prediction is not known to anyone but the fake.
    await cancel(key, id);
    fake.releaseCreates();
    await submitted;
    const [prediction] = predictionsOf(prompt);
    expect(fake.cancels).toEqual(expect.arrayContaining([prediction!.id]));
    expect(fake.cancels.filter((c) => c === prediction!.id)).toHaveLength(1);
    expect(prediction!.status).toBe('canceled');
  });
});

describe('a job whose reservation the sweep released', () => {
  it('submit, poll and copy call no upstream and fail reservation_expired, not retried; the job then fails as such, refunded once', async () => {
    const { account, id, prompt } = await runningJob();
    const { provider, handle } = await steps.submitJobToProvider(id, route('ok'), Date.now() + 300_000);
    const [prediction] = predictionsOf(prompt);
    const polls = prediction!.polls;
    // Its hold outlived the deadline and the margin; the sweep, run as at a moment long past, releases it.
    await orm.em.fork().execute(`update holds set expires_at = '2000-01-01T00:00:00Z' where id = ? and status = 'open'`, [`hold_${id}`]);
    expect(await releaseExpiredHolds(orm.em.fork(), new Date('2000-01-01T00:00:01Z'))).toBe(1);

    const expired = { type: 'reservation_expired', nonRetryable: true, details: { jobOver: true } };
    expect(await stepFailure(steps.submitJobToProvider(id, route('ok'), Date.now() + 300_000))).toMatchObject(expired);
    expect(await stepFailure(steps.askProviderForJobState(provider, handle, Date.now() + 300_000, id))).toMatchObject(expired);
    expect(await stepFailure(steps.copyResultToStorage(id, provider, handle, Date.now() + 600_000))).toMatchObject(expired);
    // Not one call reached the upstream: no new prediction, no poll, no result fetch.
    expect(predictionsOf(prompt)).toHaveLength(1);
    expect(prediction!.polls).toBe(polls);

    // The workflow then fails the job with that error: refunded once (the sweep's release), nothing captured.
    const ending = await steps.refundAndFailJob(id, { code: 'reservation_expired', message: 'The reservation expired before the job finished. It was refunded in full.' });
    expect(ending).toMatchObject({ status: 'failed', error: { code: 'reservation_expired' } });
    expect((await expectSettledWallet(orm, account.id)).balance.purchased).toBe(20_000_000n);
  });
});

describe("a 429's Retry-After and the job's deadline", () => {
  it('a Retry-After ending past the deadline fails the step at once, not retried; one within it is retried no sooner than asked', async () => {
    const { key, id } = await runningJob();
    // The fake asks for 400 s. The deadline in 300 s: not waited for, the route is done.
    const past = await stepFailure(steps.submitJobToProvider(id, route('busy'), Date.now() + 300_000));
    expect(past).toEqual({ type: 'provider_rate_limited', nonRetryable: true, nextRetryDelay: undefined, details: { onMerits: false } });
    // The deadline in an hour: retried after the 400 s asked.
    const within = await stepFailure(steps.submitJobToProvider(id, route('busy'), Date.now() + 3_600_000));
    expect(within).toMatchObject({ type: 'provider_rate_limited', nonRetryable: false, nextRetryDelay: 400_000 });
    // Runs started before the deadline bounded the steps name none: retried as they were.
    expect(await stepFailure(steps.submitJobToProvider(id, route('busy')))).toMatchObject({ nonRetryable: false, nextRetryDelay: 400_000 });
    await cancel(key, id);
  });
});
