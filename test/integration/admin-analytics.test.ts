import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { ensureAnalyticsRefreshSchedule } from '../../config/temporal.ts';
import { addDays } from '../../core/admin/analytics/days.ts';
import { jobDurationsSchema, jobsByStatusSchema } from '../../core/admin/analytics/jobs.ts';
import { refreshAnalytics } from '../../core/admin/analytics/refresh.ts';
import { topAccountsSchema, topModelsSchema } from '../../core/admin/analytics/top.ts';
import { usageSchema } from '../../core/admin/analytics/usage.ts';
import type { Credential } from '../../core/auth/principals.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { completeJob, endJob, failJob, markEnded } from '../../core/generations/end-job.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { openOrm } from '../../core/orm.ts';
import { createCaller } from '../../core/router.ts';
import type { RunningWorker } from '../../workflows/worker.ts';
import { makeAccount, makeKey, migratedFreshDatabase, testDeps } from '../support/db.ts';
import { expectReplays, startTestWorker } from '../support/jobs.ts';
import { refusal } from '../support/refusal.ts';

/**
 * Usage analytics on a database of their own (the refresh reads every account's ledger): a
 * small known set of chats, jobs that succeeded, failed and were canceled, a refund after
 * settlement, adjustments and entries of earlier days, then each query's exact numbers.
 */
let db: { url: string; drop: () => Promise<void> };
let orm: MikroORM;
let deps: CoreDeps;
let today: string;
/** The creation day of every job (durations need times the test sets). */
let jobDay: string;
let oldDay: string;
const ids = { a: '', b: '', c: '', kA1: '', kA2: '', kB: '', kC: '' };

const as = (credential: Credential) => createCaller(createContext(deps, credential));
const analytics = () => as({ kind: 'internal' }).admin.analytics;
const coins = (n: string) => parseCoins(n);
const later = new Date(Date.now() + 3_600_000);

async function chat(account: string, key: string, model: string, held: string, captured: string | null) {
  const em = orm.em.fork();
  const { holdId } = await reserve(em, {
    accountId: account,
    amount: coins(held),
    reference: `chatcmpl-${randomBytes(8).toString('hex')}`,
    expiresAt: later,
    metadata: { kind: 'chat', model, key_id: key },
  });
  if (captured === null) await release(em, holdId);
  else await settle(em, holdId, coins(captured));
}

/** A job as create-generation records it: its hold (metadata kind generation) and its row. */
async function job(account: string, key: string, model: string, price: string): Promise<string> {
  const id = `gen_${randomBytes(8).toString('hex')}`;
  const em = orm.em.fork();
  await reserve(em, { accountId: account, amount: coins(price), reference: id, holdId: `hold_${id}`, expiresAt: later, metadata: { kind: 'generation', model, key_id: key } });
  await em.execute(
    `insert into generations (id, account_id, key_id, model_id, prompt, settings, inputs, price_micro, hold_id) values (?, ?, ?, ?, '', '{}', '{}', ?, ?)`,
    [id, account, key, model, coins(price).toString(), `hold_${id}`],
  );
  return id;
}

/** Puts a job's times on jobDay: created at `at`, started `startMs` later (or never), ended `endMs` after creation. */
async function times(id: string, at: string, startMs: number | null, endMs: number | null) {
  await orm.em.fork().execute(
    `update generations set created_at = ?::timestamptz,
       started_at = ?::timestamptz + (? || ' milliseconds')::interval * (case when ?::boolean then 1 end),
       completed_at = case when completed_at is null then null else ?::timestamptz + (? || ' milliseconds')::interval end
     where id = ?`,
    [`${jobDay}T${at}Z`, `${jobDay}T${at}Z`, String(startMs ?? 0), startMs !== null, `${jobDay}T${at}Z`, String(endMs ?? 0), id],
  );
}

const succeed = (id: string) => completeJob(deps, orm.em.fork(), id, { key: `results/${id}`, mime_type: 'image/png', bytes: 1, filename: 'a.png' });
const cancel = (id: string) =>
  endJob(orm.em.fork(), id, async (tx, row) => {
    await release(tx, row.hold_id);
    await markEnded(tx, id, 'canceled', null);
  });

async function adjust(account: string, kind: 'adjustment' | 'refund', amount: bigint, reference: string) {
  const [row] = await orm.em.fork().execute<{ status: string }[]>('select status from mas_adjust(?, ?, ?::bigint, ?, ?, ?)', [
    account,
    kind,
    amount.toString(),
    reference,
    `test:${randomBytes(6).toString('hex')}`,
    kind === 'refund' ? 'Refund' : 'Adjustment',
  ]);
  expect(row!.status).toBe('applied');
}

/** A capture dated `day`, written as mas_end_hold would have: what a ledger of past days holds. */
async function pastCapture(account: string, key: string, model: string, day: string, amount: string) {
  const hold = `hold_past_${randomBytes(6).toString('hex')}`;
  const em = orm.em.fork();
  await em.execute(
    `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, captured_micro, reference, metadata, expires_at, created_at, ended_at)
     values (?, ?, ?::bigint, 0, ?::bigint, 'settled', ?::bigint, ?, ?::jsonb, ?::timestamptz, ?::timestamptz, ?::timestamptz)`,
    [hold, account, coins(amount).toString(), coins(amount).toString(), coins(amount).toString(), `chatcmpl-${hold}`, JSON.stringify({ kind: 'chat', model, key_id: key }), `${day}T13:00:00Z`, `${day}T12:00:00Z`, `${day}T12:00:01Z`],
  );
  await em.execute(
    `insert into ledger_entries (account_id, pocket, kind, amount_micro, balance_after_micro, reference, hold_id, idempotency_key, description, created_at)
     values (?, 'held', 'capture', ?::bigint, 0, ?, ?, ?, 'API usage', ?::timestamptz)`,
    [account, (-coins(amount)).toString(), `chatcmpl-${hold}`, hold, `${hold}:capture:held`, `${day}T12:00:01Z`],
  );
}

const rollups = async () => {
  const em = orm.em.fork();
  return {
    usage: await em.execute('select * from usage_daily order by day, account_id, model_id, key_id'),
    models: await em.execute('select * from usage_daily_models order by day, model_id'),
    accounts: await em.execute('select * from usage_daily_accounts order by day, account_id'),
    jobs: await em.execute('select * from jobs_daily order by day, model_id, status, error_code'),
  };
};

const zero = { spent_coins: 0, refunded_coins: 0, net_coins: 0, job_released_coins: 0, adjusted_coins: 0, requests: 0 };

beforeAll(async () => {
  db = await migratedFreshDatabase();
  orm = await openOrm({ url: db.url });
  deps = testDeps(orm);
  const [now] = await orm.em.fork().execute<{ today: string }[]>(`select (now() at time zone 'UTC')::date::text as today`);
  today = now!.today;
  jobDay = addDays(today, -3);
  oldDay = addDays(today, -10);

  const a = await makeAccount(orm, { coins: '200' });
  const b = await makeAccount(orm, { coins: '100' });
  const c = await makeAccount(orm);
  Object.assign(ids, { a: a.id, b: b.id, c: c.id });
  ids.kA1 = (await makeKey(orm, a.id)).id;
  ids.kA2 = (await makeKey(orm, a.id)).id;
  ids.kB = (await makeKey(orm, b.id)).id;
  ids.kC = (await makeKey(orm, c.id)).id;

  // Chats: what is captured is spend; the unused reservation and a failed request's hold are not.
  await chat(a.id, ids.kA1, 'm-chat', '5', '2');
  await chat(a.id, ids.kA2, 'm-chat', '4', '1.5');
  await chat(b.id, ids.kB, 'm-chat', '3', null);

  // Jobs: three succeeded image jobs (one refunded after settlement), a failed one; video jobs
  // succeeded, failed, canceled while queued, and one still queued (its hold open).
  const j1 = await job(a.id, ids.kA1, 'm-img', '10');
  const j7 = await job(a.id, ids.kA1, 'm-img', '10');
  const j8 = await job(a.id, ids.kA2, 'm-img', '10');
  const j2 = await job(a.id, ids.kA1, 'm-img', '10');
  const j5 = await job(b.id, ids.kB, 'm-vid', '7');
  const j4 = await job(b.id, ids.kB, 'm-vid', '7');
  const j3 = await job(b.id, ids.kB, 'm-vid', '7');
  const j6 = await job(b.id, ids.kB, 'm-vid', '7');
  for (const id of [j1, j7, j8, j5]) await succeed(id);
  await failJob(orm.em.fork(), j2, { message: 'upstream said no', code: 'upstream_error' });
  await failJob(orm.em.fork(), j4, { message: 'too slow', code: 'timeout' });
  await cancel(j3);
  await times(j1, '10:00:00', 1000, 3000);
  await times(j7, '10:10:00', 1000, 5000);
  await times(j8, '10:20:00', 1000, 11000);
  await times(j2, '10:30:00', 1000, 1500);
  await times(j5, '11:00:00', 2000, 6000);
  await times(j4, '11:10:00', 1000, 61000);
  await times(j3, '11:20:00', null, 2000);
  await times(j6, '11:30:00', null, null);

  await adjust(a.id, 'refund', coins('4'), j1);
  await adjust(a.id, 'adjustment', coins('5'), 'ticket-1');
  await adjust(b.id, 'adjustment', -coins('2'), 'ticket-2');

  await pastCapture(c.id, ids.kC, 'm-old', oldDay, '3');
});

afterAll(async () => {
  await orm?.close();
  await db?.drop();
});

describe('usage analytics', () => {
  it('the first refresh rebuilds every day the ledger and the jobs hold', async () => {
    const done = await refreshAnalytics(orm.em.fork());
    // Usage: the old day, yesterday and today; jobs: their day, yesterday and today.
    expect(done).toMatchObject({ object: 'analytics_refresh', usage_days: 3, job_days: 3 });
    expect(new Date(done.as_of).getTime()).toBeGreaterThan(Date.now() - 60_000);
  });

  it('spend per day: captures only; refunds, job releases and adjustments apart', async () => {
    const all = usageSchema.parse(await analytics().usage({ from: oldDay, to: today }));
    expect(all.totals).toEqual({ spent_coins: 43.5, refunded_coins: 4, net_coins: 39.5, job_released_coins: 24, adjusted_coins: 3, requests: 7 });
    expect(all.data).toEqual([
      { day: oldDay, account_id: null, model_id: null, key_id: null, ...zero, spent_coins: 3, net_coins: 3, requests: 1 },
      { day: today, account_id: null, model_id: null, key_id: null, spent_coins: 40.5, refunded_coins: 4, net_coins: 36.5, job_released_coins: 24, adjusted_coins: 3, requests: 6 },
    ]);
    expect(all.as_of).not.toBeNull();

    const byModel = usageSchema.parse(await analytics().usage({ from: today, to: today, group_by: ['model'] }));
    expect(byModel.data).toEqual([
      { day: today, account_id: null, model_id: 'm-img', key_id: null, spent_coins: 30, refunded_coins: 4, net_coins: 26, job_released_coins: 10, adjusted_coins: 0, requests: 3 },
      { day: today, account_id: null, model_id: 'm-vid', key_id: null, ...zero, spent_coins: 7, net_coins: 7, job_released_coins: 14, requests: 1 },
      { day: today, account_id: null, model_id: 'm-chat', key_id: null, ...zero, spent_coins: 3.5, net_coins: 3.5, requests: 2 },
      { day: today, account_id: null, model_id: null, key_id: null, ...zero, adjusted_coins: 3 },
    ]);

    const byAccount = usageSchema.parse(await analytics().usage({ from: today, to: today, group_by: ['account'] }));
    expect(byAccount.data).toEqual([
      { day: today, account_id: ids.a, model_id: null, key_id: null, spent_coins: 33.5, refunded_coins: 4, net_coins: 29.5, job_released_coins: 10, adjusted_coins: 5, requests: 5 },
      { day: today, account_id: ids.b, model_id: null, key_id: null, ...zero, spent_coins: 7, net_coins: 7, job_released_coins: 14, adjusted_coins: -2, requests: 1 },
    ]);

    const keysOfA = usageSchema.parse(await analytics().usage({ from: oldDay, to: today, account_id: ids.a, group_by: ['key'] }));
    expect(keysOfA.data).toEqual([
      { day: today, account_id: null, model_id: null, key_id: ids.kA1, spent_coins: 22, refunded_coins: 4, net_coins: 18, job_released_coins: 10, adjusted_coins: 0, requests: 3 },
      { day: today, account_id: null, model_id: null, key_id: ids.kA2, ...zero, spent_coins: 11.5, net_coins: 11.5, requests: 2 },
      { day: today, account_id: null, model_id: null, key_id: null, ...zero, adjusted_coins: 5 },
    ]);
    expect(keysOfA.totals).toEqual({ spent_coins: 33.5, refunded_coins: 4, net_coins: 29.5, job_released_coins: 10, adjusted_coins: 5, requests: 5 });

    const oneKey = usageSchema.parse(await analytics().usage({ from: today, to: today, key_id: ids.kB, model_id: 'm-vid' }));
    expect(oneKey.totals).toEqual({ ...zero, spent_coins: 7, net_coins: 7, job_released_coins: 14, requests: 1 });

    const all3 = usageSchema.parse(await analytics().usage({ from: today, to: today, group_by: ['account', 'model', 'key'], limit: 2 }));
    expect(all3.data).toHaveLength(2);
    expect(all3.has_more).toBe(true);
    expect(all3.data[0]).toMatchObject({ account_id: ids.a, model_id: 'm-img', key_id: ids.kA1, spent_coins: 20, refunded_coins: 4, job_released_coins: 10 });
    expect(all3.totals.spent_coins).toBe(40.5);

    const empty = usageSchema.parse(await analytics().usage({ from: '2001-01-01', to: '2001-01-31' }));
    expect(empty).toMatchObject({ totals: zero, data: [], has_more: false });
  });

  it('top accounts and top models by spend', async () => {
    const accounts = topAccountsSchema.parse(await analytics().topAccounts({ from: oldDay, to: today, limit: 2 }));
    expect(accounts.data.map((r) => [r.account_id, r.spent_coins, r.refunded_coins, r.net_coins])).toEqual([
      [ids.a, 33.5, 4, 29.5],
      [ids.b, 7, 0, 7],
    ]);
    expect(accounts.data[0]!.email).toContain('@test.example');
    const onVideo = topAccountsSchema.parse(await analytics().topAccounts({ from: oldDay, to: today, model_id: 'm-vid' }));
    expect(onVideo.data.map((r) => [r.account_id, r.spent_coins, r.job_released_coins])).toEqual([[ids.b, 7, 14]]);

    const models = topModelsSchema.parse(await analytics().topModels({ from: oldDay, to: today }));
    expect(models.data.map((r) => [r.model_id, r.spent_coins, r.refunded_coins, r.requests])).toEqual([
      ['m-img', 30, 4, 3],
      ['m-vid', 7, 0, 1],
      ['m-chat', 3.5, 0, 2],
      ['m-old', 3, 0, 1],
    ]);
    const ofB = topModelsSchema.parse(await analytics().topModels({ from: today, to: today, account_id: ids.b, limit: 1 }));
    expect(ofB.data.map((r) => [r.model_id, r.spent_coins])).toEqual([['m-vid', 7]]);
  });

  it('jobs by status and failure reason, and p50/p95 durations per model', async () => {
    const statuses = jobsByStatusSchema.parse(await analytics().jobsByStatus({ from: jobDay, to: jobDay }));
    expect(statuses).toMatchObject({
      total: 8,
      by_status: [
        { status: 'queued', jobs: 1 },
        { status: 'running', jobs: 0 },
        { status: 'succeeded', jobs: 4 },
        { status: 'failed', jobs: 2 },
        { status: 'canceled', jobs: 1 },
      ],
      failures: [
        { code: 'timeout', jobs: 1 },
        { code: 'upstream_error', jobs: 1 },
      ],
    });
    const video = jobsByStatusSchema.parse(await analytics().jobsByStatus({ from: jobDay, to: jobDay, model_id: 'm-vid' }));
    expect(video.total).toBe(4);
    expect(video.failures).toEqual([{ code: 'timeout', jobs: 1 }]);

    const succeeded = jobDurationsSchema.parse(await analytics().jobDurations({ from: jobDay, to: today }));
    // m-img runs 2 s, 4 s and 10 s: p95 = 4000 + 0.9 × 6000; totals are one second longer.
    expect(succeeded.data).toEqual([
      { model_id: 'm-img', jobs: 3, run_p50_ms: 4000, run_p95_ms: 9400, total_p50_ms: 5000, total_p95_ms: 10400 },
      { model_id: 'm-vid', jobs: 1, run_p50_ms: 4000, run_p95_ms: 4000, total_p50_ms: 6000, total_p95_ms: 6000 },
    ]);
    const canceled = jobDurationsSchema.parse(await analytics().jobDurations({ from: jobDay, to: jobDay, status: 'canceled' }));
    expect(canceled.data).toEqual([{ model_id: 'm-vid', jobs: 1, run_p50_ms: null, run_p95_ms: null, total_p50_ms: 2000, total_p95_ms: 2000 }]);
    const failed = jobDurationsSchema.parse(await analytics().jobDurations({ from: jobDay, to: jobDay, status: 'failed', model_id: 'm-img' }));
    expect(failed.data).toEqual([{ model_id: 'm-img', jobs: 1, run_p50_ms: 500, run_p95_ms: 500, total_p50_ms: 1500, total_p95_ms: 1500 }]);
  });

  it('the refresh is idempotent, and a later run picks up the days touched since', async () => {
    const before = await rollups();
    expect(before.usage.length).toBeGreaterThan(0);
    const again = await refreshAnalytics(orm.em.fork());
    expect(again).toMatchObject({ usage_days: 2, job_days: 2 }); // nothing new: yesterday and today
    expect(await rollups()).toEqual(before);

    const older = addDays(today, -20);
    await pastCapture(ids.c, ids.kC, 'm-old', older, '1.25');
    expect(await refreshAnalytics(orm.em.fork())).toMatchObject({ usage_days: 3 });
    const c = usageSchema.parse(await analytics().usage({ from: older, to: today, account_id: ids.c }));
    expect(c.data.map((r) => [r.day, r.spent_coins])).toEqual([
      [older, 1.25],
      [oldDay, 3],
    ]);
  });

  it('checks its ranges and needs an admin', async () => {
    expect(await refusal(analytics().usage({ from: today, to: oldDay }))).toMatchObject({ code: 'invalid_request', param: 'to', message: expect.stringMatching(/must not be before/) });
    expect(await refusal(analytics().topModels({ from: '2020-01-01', to: '2021-06-01' }))).toMatchObject({ param: 'to', message: expect.stringMatching(/at most 366 days/) });
    expect(await refusal(analytics().usage({ from: '2026-02-30', to: '2026-03-01' }))).toMatchObject({ code: 'invalid_request', param: 'from' });
    const key = await makeKey(orm, ids.c);
    for (const credential of [{ kind: 'none' }, { kind: 'admin', token: null }, { kind: 'bearer', token: key.key }] as Credential[]) {
      expect(await refusal(as(credential).admin.analytics.usage({ from: today, to: today }))).toMatchObject({ code: 'unauthorized' });
    }
  });
});

describe('analytics refresh schedule', () => {
  let connection: Connection;
  let client: Client;
  let worker: RunningWorker;
  const taskQueue = `test-analytics-${randomBytes(4).toString('hex')}`;
  const scheduleId = `test-analytics-${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    connection = await Connection.connect({ address: inject('temporalAddress') });
    client = new Client({ connection });
    worker = await startTestWorker({ deps, taskQueue });
  });
  afterAll(async () => {
    await client?.schedule.getHandle(scheduleId).delete().catch(() => undefined);
    await worker?.shutdown();
    await connection?.close();
  });

  it('runs the refresh as a Temporal Schedule, and its workflow histories replay', async () => {
    await adjust(ids.b, 'adjustment', coins('1'), 'ticket-3');
    await ensureAnalyticsRefreshSchedule(client, 1, { scheduleId, taskQueue });
    await ensureAnalyticsRefreshSchedule(client, 1, { scheduleId, taskQueue }); // a second instance starting: updated in place
    await vi.waitFor(
      async () => {
        const b = usageSchema.parse(await analytics().usage({ from: today, to: today, account_id: ids.b }));
        expect(b.totals.adjusted_coins).toBe(-1);
      },
      { timeout: 30_000, interval: 250 },
    );
    const description = await client.schedule.getHandle(scheduleId).describe();
    expect(description.action).toMatchObject({ type: 'startWorkflow', workflowType: 'analyticsRefreshWorkflow' });
    const runs = description.info.recentActions.map((a) => a.action.workflow.workflowId);
    expect(runs.length).toBeGreaterThan(0);
    await expectReplays(await Promise.all(runs.map(async (workflowId) => ({ workflowId, history: await client.workflow.getHandle(workflowId).fetchHistory() }))));
  });
});
