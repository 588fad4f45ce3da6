import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { Client, Connection, WorkflowFailedError, WorkflowNotFoundError } from '@temporalio/client';
import { ApplicationFailure, defaultPayloadConverter } from '@temporalio/common';
import proto from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import type { Server } from 'node:http';
import pino from 'pino';
import { ensureHoldSweepSchedule, ensureResultRetentionSchedule, ensureSearchAttributes, searchAttributeCommands, temporalGenerationStarter } from '../../config/temporal.ts';
import type { MikroORM } from '@mikro-orm/postgresql';
import { loadCatalogFile } from '../../config/catalog.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { endOrphanedJobs } from '../../core/generations/orphans.ts';
import { deleteExpiredResults } from '../../core/generations/retention.ts';
import { reserve } from '../../core/money/holds.ts';
import { openOrm } from '../../core/orm.ts';
import { createActivities } from '../../workflows/activities.ts';

import { makeAccount, makeKey, migratedFreshDatabase, silentLogger, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness, startTestWorker } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';

/**
 * What an operator sees and does in the Temporal UI (issue 19), on a real Temporal dev server,
 * a real worker and PostgreSQL: workflows close as their job ends, search attributes find a
 * customer's jobs, and Terminate (or a cancel request from the UI) never loses money.
 */
let h: JobHarness;
let client: Client;

beforeAll(async () => {
  h = await startJobHarness({ retentionSeconds: 2 });
  client = new Client({ connection: h.connection });
});
afterAll(async () => {
  await h.close();
});

async function customer(coins = '100', orm: MikroORM = h.orm) {
  const account = await makeAccount(orm, { coins });
  const { key, id: keyId } = await makeKey(orm, account.id);
  return { account, key, keyId };
}

async function submit(key: string, settings: Record<string, unknown>, prompt = 'a lighthouse at dusk') {
  const res = await getJson(`${h.base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mas/image-demo', prompt, settings: { size: 128, ...settings } }),
  });
  expect(res.status).toBe(202);
  return res.body.id as string;
}

/** The job's row once it ended, with the time it ended (the database's clock). */
async function ended(id: string, timeout = 30_000, orm: MikroORM = h.orm) {
  let row: { status: string; error: { code: string; message: string } | null; completed_at: string } | undefined;
  await vi.waitFor(
    async () => {
      [row] = await orm.em.fork().execute(`select status, error, completed_at::text from generations where id = ?`, [id]);
      expect(['succeeded', 'failed', 'canceled']).toContain(row!.status);
    },
    { timeout, interval: 50 },
  );
  return row!;
}

async function running(id: string) {
  await vi.waitFor(async () => expect((await h.orm.em.fork().execute<{ status: string }[]>('select status from generations where id = ?', [id]))[0]!.status).toBe('running'), {
    timeout: 20_000,
    interval: 50,
  });
}

/** The workflow's close status and description, once it closed. */
async function closed(id: string) {
  let description: Awaited<ReturnType<ReturnType<Client['workflow']['getHandle']>['describe']>> | undefined;
  await vi.waitFor(
    async () => {
      description = await client.workflow.getHandle(id).describe();
      expect(description.status.name).not.toBe('RUNNING');
    },
    { timeout: 10_000, interval: 20 },
  );
  return { status: description!.status.name, description: description! };
}

const EventType = proto.temporal.api.enums.v1.EventType;
type HistoryEvent = NonNullable<Awaited<ReturnType<ReturnType<Client['workflow']['getHandle']>['fetchHistory']>>['events']>[number];

/** The step a local activity's marker recorded (its activity type), or undefined for any other event. */
function localActivityOf(event: HistoryEvent): string | undefined {
  const attrs = event.markerRecordedEventAttributes;
  const payload = attrs?.markerName === 'core_local_activity' ? attrs.details?.data?.payloads?.[0] : undefined;
  return payload ? defaultPayloadConverter.fromPayload<{ activity_type: string }>(payload).activity_type : undefined;
}

/**
 * What the workflow's history holds after the job ended (the event `endedBy` picks: the step
 * that ended it, or the API's cancel request), by event type. A workflow that closes as its job
 * ends waits on nothing more: no timer fires, no activity or child runs, no signal is awaited;
 * only the bookkeeping of the task that ends it (markers, the status search attribute, a timer
 * started and canceled, workflow tasks) and the close. Read from the history, not timed, so a
 * loaded machine changes nothing.
 */
async function afterTheJobEnded(id: string, endedBy: (e: HistoryEvent) => boolean): Promise<string[]> {
  const events = (await client.workflow.getHandle(id).fetchHistory()).events ?? [];
  const end = events.findIndex(endedBy);
  expect(end, 'the event that ended the job').toBeGreaterThanOrEqual(0);
  return events.slice(end + 1).map((e) => EventType[e.eventType!]!.replace(/^EVENT_TYPE_/, ''));
}
const BOOKKEEPING = new Set(['WORKFLOW_TASK_SCHEDULED', 'WORKFLOW_TASK_STARTED', 'WORKFLOW_TASK_COMPLETED', 'MARKER_RECORDED', 'UPSERT_WORKFLOW_SEARCH_ATTRIBUTES', 'TIMER_STARTED', 'TIMER_CANCELED']);
function expectClosedAtOnce(after: string[], closeEvent: string) {
  expect(after.at(-1)).toBe(closeEvent);
  expect(after.slice(0, -1).filter((t) => !BOOKKEEPING.has(t)), JSON.stringify(after)).toEqual([]);
}

async function visible(query: string, expected: number): Promise<string[]> {
  let ids: string[] = [];
  await vi.waitFor(
    async () => {
      ids = [];
      for await (const wf of client.workflow.list({ query })) ids.push(wf.workflowId);
      expect(ids.length).toBe(expected);
    },
    { timeout: 15_000, interval: 200 },
  );
  return ids.sort();
}

/**
 * Jobs on a task queue no worker polls yet: their workflows start and wait, as when every worker
 * is down. Answers a submit through an app wired to that queue, and a worker to start later.
 */
async function idleQueue(suffix: string, orm: MikroORM = h.orm) {
  const taskQueue = `${h.taskQueue}-${suffix}`;
  const deps = testDeps(orm, { generations: temporalGenerationStarter(client, { taskQueue }), storageDir: h.storageDir });
  const submitThere = async (key: string) => {
    const app = createTestApp({ deps, logger: silentLogger, publicBaseUrl: 'http://localhost' });
    const server = await new Promise<Server>((resolve) => {
      const srv = app.listen(0, '127.0.0.1', () => resolve(srv));
    });
    try {
      const res = await getJson(`http://127.0.0.1:${(server.address() as { port: number }).port}/api/v1/generations`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128 } }),
      });
      expect(res.status).toBe(202);
      return res.body.id as string;
    } finally {
      await new Promise((r) => server.close(r));
    }
  };
  const startWorkerThere = () => startTestWorker({ deps, taskQueue });
  return { taskQueue, submitThere, startWorkerThere };
}

/** The ledger entries that moved the job's hold: one release when refunded, one capture when charged. */
async function holdEntries(jobId: string, orm: MikroORM = h.orm) {
  return orm.em.fork().execute<{ kind: string; n: number }[]>(
    `select kind, count(*)::int as n from ledger_entries where hold_id = ? and pocket = 'held' and kind <> 'reservation' group by kind order by kind`,
    [`hold_${jobId}`],
  );
}

describe('the workflow closes as the job ends', () => {
  it('succeeded → Completed, failed → Failed with the job error, canceled → Canceled, each closing as the job ends, waiting on nothing more', async () => {
    const { account, key } = await customer();
    const ok = await submit(key, {});
    const bad = await submit(key, { fail: true });
    const slow = await submit(key, { delay_ms: 30_000 });

    const okRow = await ended(ok);
    expect(okRow.status).toBe('succeeded');
    expect((await closed(ok)).status).toBe('COMPLETED');
    expectClosedAtOnce(await afterTheJobEnded(ok, (e) => localActivityOf(e) === 'chargeAndCompleteJob'), 'WORKFLOW_EXECUTION_COMPLETED');
    expect(await client.workflow.getHandle(ok).result()).toBe('succeeded');

    const badRow = await ended(bad);
    expect(badRow.status).toBe('failed');
    expect((await closed(bad)).status).toBe('FAILED');
    expectClosedAtOnce(await afterTheJobEnded(bad, (e) => localActivityOf(e) === 'refundAndFailJob'), 'WORKFLOW_EXECUTION_FAILED');
    const failure = await client.workflow.getHandle(bad).result().catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(WorkflowFailedError);
    const cause = (failure as WorkflowFailedError).cause as ApplicationFailure;
    expect(cause).toBeInstanceOf(ApplicationFailure);
    expect({ type: cause.type, message: cause.message }).toEqual({ type: badRow.error!.code, message: badRow.error!.message });

    await running(slow);
    expect((await getJson(`${h.base}/api/v1/generations/${slow}/cancel`, { method: 'POST', headers: bearer(key) })).status).toBe(200);
    const slowRow = await ended(slow);
    expect(slowRow.status).toBe('canceled');
    expect((await closed(slow)).status).toBe('CANCELLED');
    // The API ended the job, then asked the workflow to cancel: it closes on that request, not on its one-minute fallback timer.
    expectClosedAtOnce(await afterTheJobEnded(slow, (e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED), 'WORKFLOW_EXECUTION_CANCELED');
    await expectSettledWallet(h.orm, account.id);
  });

  it("a cancel request sent to the workflow (the UI's Request Cancellation) cancels and refunds the job, as the API's cancel does", async () => {
    const { account, key } = await customer('10');
    const id = await submit(key, { delay_ms: 30_000 });
    await running(id);
    await client.workflow.getHandle(id).cancel();
    const row = await ended(id);
    expect(row).toMatchObject({ status: 'canceled', error: null });
    expect((await closed(id)).status).toBe('CANCELLED');
    expect(await holdEntries(id)).toEqual([{ kind: 'release', n: 1 }]);
    const wallet = await expectSettledWallet(h.orm, account.id);
    expect(wallet.balance.purchased + wallet.balance.subscription).toBe(10_000_000n);
  });

  it('a webhook is delivered by a workflow of its own, so the job workflow closes when the job ends', async () => {
    const { key } = await customer();
    const res = await getJson(`${h.base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      // Nothing listens on port 9: delivery keeps failing and retrying.
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128 }, webhook_url: 'http://127.0.0.1:9/hook' }),
    });
    expect((await ended(res.body.id)).status).toBe('succeeded');
    expect((await closed(res.body.id)).status).toBe('COMPLETED');
    const webhook = await client.workflow.getHandle(`${res.body.id}-webhook`).describe();
    expect(webhook.type).toBe('webhookDeliveryWorkflow');
    await client.workflow.getHandle(`${res.body.id}-webhook`).terminate('test over');
  });
});

describe('search attributes and summaries', () => {
  it('MasAccountId lists exactly the account’s jobs, MasJobStatus narrows them, and the summary shows the prompt’s head only', async () => {
    const a = await customer();
    const b = await customer();
    const secret = `the secret tail ${randomBytes(6).toString('hex')}`;
    const aOk = await submit(a.key, {}, `a red bicycle leaning on a blue wall near the sea, ${secret}`);
    const aBad = await submit(a.key, { fail: true });
    const bOk = await submit(b.key, {});
    for (const id of [aOk, aBad, bOk]) await ended(id);

    expect(await visible(`MasAccountId = "${a.account.id}"`, 2)).toEqual([aOk, aBad].sort());
    expect(await visible(`MasAccountId = "${a.account.id}" AND MasJobStatus = "failed"`, 1)).toEqual([aBad]);
    expect(await visible(`MasAccountId = "${a.account.id}" AND MasJobStatus = "succeeded"`, 1)).toEqual([aOk]);
    expect(await visible(`MasAccountId = "${b.account.id}"`, 1)).toEqual([bOk]);
    expect(await visible(`MasKeyId = "${a.keyId}" AND MasModel = "mas/image-demo" AND MasModelType = "image"`, 2)).toEqual([aOk, aBad].sort());

    const description = await client.workflow.getHandle(aOk).describe();
    const summary = await description.staticSummary();
    expect(summary).toMatch(/^mas\/image-demo · [\d.]+ coins · “a red bicycle leaning on a blue wall…”$/);
    expect(await description.staticDetails()).toContain(a.account.id);
    // The prompt's tail is nowhere in the workflow: not its summary, details, input or history.
    const history = JSON.stringify(await client.workflow.getHandle(aOk).fetchHistory());
    expect(history).not.toContain('secret tail');
    expect(`${summary}${await description.staticDetails()}`).not.toContain('secret tail');
  });
});

describe('faults from the operator’s side end the job', () => {
  it('Terminate: the sweep fails the job with the cause, refunds it in full with one release, and stays at one however often it runs', async () => {
    const { account, key } = await customer('10');
    const id = await submit(key, { delay_ms: 60_000 });
    await running(id);
    await client.workflow.getHandle(id).terminate('stuck, says the on-call');
    const activities = createActivities(h.deps);
    expect(await activities.failJobsWhoseWorkflowClosed()).toBeGreaterThanOrEqual(1);

    const row = await ended(id);
    expect(row.status).toBe('failed');
    expect(row.error).toEqual({ code: 'workflow_terminated', message: expect.stringContaining('terminated by an operator') });
    const job = (await getJson(`${h.base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'workflow_terminated' } });
    expect(await holdEntries(id)).toEqual([{ kind: 'release', n: 1 }]);
    const wallet = await expectSettledWallet(h.orm, account.id);
    expect(wallet.balance.purchased + wallet.balance.subscription).toBe(10_000_000n);

    // Terminate again (the workflow is closed) and sweep twice more: still one release.
    await expect(client.workflow.getHandle(id).terminate('again')).rejects.toBeInstanceOf(WorkflowNotFoundError);
    await activities.failJobsWhoseWorkflowClosed();
    await activities.failJobsWhoseWorkflowClosed();
    expect(await holdEntries(id)).toEqual([{ kind: 'release', n: 1 }]);
    expect((await ended(id)).error!.code).toBe('workflow_terminated');
    await expectSettledWallet(h.orm, account.id);
  });

  it('a terminated job with a webhook: its owner still gets generation.failed, once, however often the sweep runs', async () => {
    const received: { type: string; data: { id: string; error: { code: string } | null } }[] = [];
    const receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push(JSON.parse(body));
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    try {
      const { key } = await customer('10');
      const res = await getJson(`${h.base}/api/v1/generations`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128, delay_ms: 60_000 }, webhook_url: `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook` }),
      });
      const id = res.body.id as string;
      await running(id);
      await client.workflow.getHandle(id).terminate('operator test');
      const activities = createActivities(h.deps);
      await activities.failJobsWhoseWorkflowClosed();
      await activities.failJobsWhoseWorkflowClosed();
      await vi.waitFor(() => expect(received.filter((r) => r.data.id === id)).toHaveLength(1), { timeout: 15_000, interval: 100 });
      expect(received.find((r) => r.data.id === id)).toMatchObject({ type: 'generation.failed', data: { id, error: { code: 'workflow_terminated' } } });
      // The delivery workflow completes once the receiver answered: it delivers nothing more.
      const delivery = client.workflow.getHandle(`${id}-webhook`);
      await delivery.result();
      const { runId } = await delivery.describe();
      // The sweep once more: its delivery start names the same workflow, so it starts no second
      // run (once it returned, any run it started would be the latest: the same one is).
      await activities.failJobsWhoseWorkflowClosed();
      expect(await delivery.describe()).toMatchObject({ runId, status: { name: 'COMPLETED' } });
      expect(received.filter((r) => r.data.id === id)).toHaveLength(1);
    } finally {
      await new Promise((r) => receiver.close(r));
    }
  });

  it('a cancel request sent to a job still queued (no worker yet) cancels and refunds it', async () => {
    const idle = await idleQueue('idle');
    const { account, key } = await customer('10');
    const id = await idle.submitThere(key);
    await client.workflow.getHandle(id).cancel();
    const worker = await idle.startWorkerThere();
    try {
      const row = await ended(id);
      expect(row).toMatchObject({ status: 'canceled', error: null });
      expect((await closed(id)).status).toBe('CANCELLED');
      expect(await holdEntries(id)).toEqual([{ kind: 'release', n: 1 }]);
      await expectSettledWallet(h.orm, account.id);
    } finally {
      await worker.shutdown();
    }
  });

  it('a job the sweep cannot end is logged and left for the next sweep; the orphans after it still end and are refunded', async () => {
    // A database of its own, so the broken row below is met by no other file's sweep.
    const db = await migratedFreshDatabase();
    const orm = await openOrm({ url: db.url });
    try {
      await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
      const own = await customer('100', orm);
      // The broken job's account is another: no other hold of its wallet covers the release.
      const other = await customer('100', orm);
      const job = async (at: string, reserved: boolean) => {
        const { account, keyId } = reserved ? { account: own.account, keyId: own.keyId } : other;
        const id = `gen_${randomBytes(12).toString('hex')}`;
        const em = orm.em.fork();
        if (reserved) await reserve(em, { accountId: account.id, amount: 5_000_000n, reference: id, holdId: `hold_${id}`, expiresAt: new Date(Date.now() + 3_600_000) });
        // Not reserved: an open hold the wallet does not hold, so its release breaks wallets_held_micro_check.
        else
          await em.execute(
            `insert into holds (id, account_id, amount_micro, from_subscription_micro, from_purchased_micro, status, reference, expires_at)
             values (?, ?, 5000000, 0, 5000000, 'open', ?, now() + interval '1 hour')`,
            [`hold_${id}`, account.id, id],
          );
        await em.execute(
          `insert into generations (id, account_id, key_id, model_id, status, prompt, settings, inputs, price_micro, hold_id, created_at, started_at)
           values (?, ?, ?, 'mas/image-demo', 'running', 'x', '{}', '{}', 5000000, ?, ?::timestamptz, now())`,
          [id, account.id, keyId, `hold_${id}`, at],
        );
        return id;
      };
      // The broken job is the oldest: met first, alone in its batch of one.
      const broken = await job('2026-01-01T00:00:00Z', false);
      const orphan = await job('2026-01-02T00:00:00Z', true);
      const logged: { job?: string; msg?: string; level?: number }[] = [];
      const logger = pino({ level: 'error' }, { write: (line: string) => void logged.push(JSON.parse(line)) });
      const generations = { ...h.deps.generations, state: async () => ({ state: 'missing' as const }) };
      expect(await endOrphanedJobs({ ...h.deps, generations, logger }, orm.em.fork(), 1, 1)).toEqual({ ended: 1 });

      const status = async (id: string) => (await orm.em.fork().execute<{ status: string }[]>('select status from generations where id = ?', [id]))[0]!.status;
      expect(await status(orphan)).toBe('failed');
      expect((await ended(orphan, 1_000, orm)).error?.code).toBe('workflow_missing');
      expect(await holdEntries(orphan, orm)).toEqual([{ kind: 'release', n: 1 }]);
      expect((await expectSettledWallet(orm, own.account.id)).balance.purchased).toBe(100_000_000n);
      expect(await status(broken)).toBe('running');
      expect(logged).toEqual([expect.objectContaining({ level: 50, job: broken, msg: expect.stringContaining('could not end an orphaned job') })]);
    } finally {
      await orm.close();
      await db.drop();
    }
  });

  it('a job terminated while no worker runs: the hold-sweep Schedule fails and refunds it once a worker is back', async () => {
    // A database of its own: the sweep works on the whole database, and on the one the other
    // test files share it would also restart and end their jobs, and take as long as they are many.
    const db = await migratedFreshDatabase();
    const orm = await openOrm({ url: db.url });
    try {
      await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
      const idle = await idleQueue('later', orm);
      const { account, key } = await customer('10', orm);
      const id = await idle.submitThere(key);
      await client.workflow.getHandle(id).terminate('cleaning up while the workers are down');
      expect((await orm.em.fork().execute<{ status: string }[]>('select status from generations where id = ?', [id]))[0]!.status).toBe('queued');

      // One run of the Schedule, taken now (the UI's Trigger) while no worker runs; its own
      // interval (a day) adds none. The test then waits for that run itself to end.
      const scheduleId = `${idle.taskQueue}-sweep`;
      await ensureHoldSweepSchedule(client, 86_400, { taskQueue: idle.taskQueue, scheduleId });
      const schedule = client.schedule.getHandle(scheduleId);
      let worker: Awaited<ReturnType<typeof idle.startWorkerThere>> | undefined;
      try {
        await schedule.trigger();
        let sweep: { workflowId: string; firstExecutionRunId: string } | undefined;
        await vi.waitFor(
          async () => {
            const action = (await schedule.describe()).info.recentActions.at(-1)?.action;
            expect(action?.type).toBe('startWorkflow');
            sweep = action!.workflow;
          },
          { timeout: 10_000, interval: 50 },
        );
        worker = await idle.startWorkerThere();
        // The event itself: that run ends once the worker is back.
        await client.workflow.getHandle(sweep!.workflowId, sweep!.firstExecutionRunId).result();
        const row = await ended(id, 30_000, orm);
        expect(row).toMatchObject({ status: 'failed', error: { code: 'workflow_terminated' } });
        expect(await holdEntries(id, orm)).toEqual([{ kind: 'release', n: 1 }]);
        await expectSettledWallet(orm, account.id);
      } finally {
        await schedule.delete().catch(() => undefined);
        await worker?.shutdown();
      }
    } finally {
      await orm.close();
      await db.drop();
    }
  });
});

describe('result retention', () => {
  it('the retention Schedule deletes results past their retention; their links answer 404 result_expired', async () => {
    const { key } = await customer();
    const id = await submit(key, {});
    await ended(id);
    const job = (await getJson(`${h.base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
    const link = `${h.base}${new URL(job.output.url).pathname}${new URL(job.output.url).search}`;
    expect((await fetch(link)).status).toBe(200);
    // Retention is 2 s here: the link expires with the result.
    expect(new Date(job.output.expires_at).getTime() - new Date(job.completed_at).getTime()).toBeLessThanOrEqual(2_100);
    const stored = path.join(h.storageDir, 'generations', `${id}.png`);
    await fs.access(stored);

    const scheduleId = `${h.taskQueue}-retention`;
    await ensureResultRetentionSchedule(client, 1, { taskQueue: h.taskQueue, scheduleId });
    try {
      await vi.waitFor(async () => expect(await fs.access(stored).then(() => true, () => false)).toBe(false), { timeout: 20_000, interval: 250 });
    } finally {
      await client.schedule.getHandle(scheduleId).delete().catch(() => undefined);
    }
    const gone = await getJson(link);
    expect(gone.status).toBe(404);
    expect(gone.body.error.code).toBe('result_expired');
    const [row] = await h.orm.em.fork().execute<{ output: { deleted?: boolean } }[]>('select output from generations where id = ?', [id]);
    expect(row!.output.deleted).toBe(true);
  });

  it('deletes in batches, and a second run finds nothing left (idempotent)', async () => {
    const { key } = await customer();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await submit(key, {}));
    for (const id of ids) await ended(id);
    // Retention is 2 s here: a clock 2.1 s ahead finds them past it, with no waiting.
    const deps = { storage: h.deps.storage, clock: () => new Date(Date.now() + 2_100) };
    // Batches of 2: five results (and any other test's past their retention) in three rounds.
    expect((await deleteExpiredResults(deps, h.orm.em.fork(), 2)).deleted).toBeGreaterThanOrEqual(5);
    expect((await deleteExpiredResults(deps, h.orm.em.fork(), 2)).deleted).toBe(0);
    const rows = await h.orm.em.fork().execute<{ deleted: boolean }[]>(`select (output->>'deleted')::boolean as deleted from generations where id in (${ids.map(() => '?').join(',')})`, ids);
    expect(rows.map((r) => r.deleted)).toEqual([true, true, true, true, true]);
    for (const id of ids) await expect(fs.access(path.join(h.storageDir, 'generations', `${id}.png`))).rejects.toThrow();
  });
});

describe('search attributes on a cluster', () => {
  it('a namespace without them stops the start with the commands to run; the embedded server gets them added', async () => {
    const connection = await Connection.connect({ address: inject('temporalAddress') });
    const namespace = `mas-bare-${randomBytes(4).toString('hex')}`;
    try {
      // protobufjs takes a plain number where its types say Long.
      await connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: { seconds: 86_400 as never } });
      await vi.waitFor(() => connection.workflowService.describeNamespace({ namespace }), { timeout: 10_000, interval: 200 });
      const refused = await ensureSearchAttributes(connection, namespace, { create: false }).catch((err: Error) => err);
      expect(refused).toBeInstanceOf(Error);
      expect((refused as Error).message).toContain(`temporal operator search-attribute create --namespace ${namespace} --name MasAccountId --type Keyword`);
      expect(searchAttributeCommands(namespace)).toHaveLength(5);
      await ensureSearchAttributes(connection, namespace, { create: true });
      await vi.waitFor(() => ensureSearchAttributes(connection, namespace, { create: false }), { timeout: 10_000, interval: 200 });
    } finally {
      await connection.close();
    }
  });
});

describe('Reset', () => {
  it("a job's workflow reset to its start runs the job again in the new run: it ends once, charged once, and the sweep leaves it alone", async () => {
    const { account, key } = await customer('10');
    const id = await submit(key, { delay_ms: 2_000 });
    await running(id);
    const handle = client.workflow.getHandle(id);
    const { runId } = await handle.describe();
    // The job is marked running inside the first workflow task: wait for that task to complete.
    let firstTask: NonNullable<Awaited<ReturnType<typeof handle.fetchHistory>>['events']>[number] | undefined;
    await vi.waitFor(async () => {
      firstTask = ((await handle.fetchHistory()).events ?? []).find((e) => e.workflowTaskCompletedEventAttributes);
      expect(firstTask).toBeDefined();
    }, { timeout: 10_000, interval: 50 });
    const reset = await h.connection.workflowService.resetWorkflowExecution({
      namespace: 'default',
      workflowExecution: { workflowId: id, runId },
      workflowTaskFinishEventId: firstTask!.eventId,
      reason: 'operator reset to the start',
      requestId: randomBytes(8).toString('hex'),
    });
    expect(reset.runId).not.toBe(runId);
    // The old run is closed, the new one is the workflow's latest: not an orphan.
    await createActivities(h.deps).failJobsWhoseWorkflowClosed();
    const [afterSweep] = await h.orm.em.fork().execute<{ status: string }[]>('select status from generations where id = ?', [id]);
    expect(afterSweep!.status).toBe('running');
    const row = await ended(id);
    expect(row.status).toBe('succeeded');
    expect((await closed(id)).description.runId).toBe(reset.runId);
    expect(await holdEntries(id)).toEqual([{ kind: 'capture', n: 1 }]);
    await expectSettledWallet(h.orm, account.id);
  });
});
