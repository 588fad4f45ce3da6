import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Server } from 'node:http';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { loadCatalogFile } from '../../config/catalog.ts';
import { temporalGenerationStarter } from '../../config/temporal.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { parseCoins } from '../../core/money/coins.ts';
import { makeAccount, makeKey, openTestOrm, silentLogger, testDeps, testDatabaseUrl } from '../support/db.ts';
import { bearer, createTestApp, getJson } from '../support/http.ts';
import { expectSettledWallet } from '../support/ledger.ts';
import { spawnProject, type Spawned, entryArgs } from '../support/process.ts';
import { reportSection, scale, table, FULL } from './support/results.ts';

/**
 * Issue 20, part 2: a separate worker process runs a stream of jobs (succeeding, failing, slow,
 * cancelled while queued or running) and is SIGKILLed at random moments, then replaced, many
 * times. Afterwards every job ended exactly once, and the money says so: one capture of the
 * full price per succeeded job, one full release per failed or cancelled one, no hold open,
 * every ledger summing to its balance.
 */
const JOBS = scale(200, 1000);
const KILLS = scale(20, 100);
const ACCOUNTS = 10;
const KEYS_PER_ACCOUNT = 4;
const SEED = Number(process.env.RELIABILITY_SEED ?? 20_2026);
const COINS = '100000';

/** A small seeded PRNG (mulberry32): the same seed, the same mix of jobs and kill moments. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
/** The jobs' mix and settings come from the seed alone; kill moments, pacing, key choice and cancel delays from streams of their own. */
const mixRand = prng(SEED);
const faultRand = prng(SEED + 1);
const cancelRand = prng(SEED + 2);
const between = (lo: number, hi: number, rand = mixRand) => Math.floor(lo + rand() * (hi - lo + 1));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Kind = 'succeed' | 'fail' | 'slow' | 'cancel-queued' | 'cancel-running';
interface Job {
  n: number;
  kind: Kind;
  key: string;
  accountId: string;
  id?: string;
  /** The status the job must end in: known from its kind, or from the cancel's answer. */
  expected?: 'succeeded' | 'failed' | 'canceled';
  /** The job's status seen just before the cancel request. */
  seenBeforeCancel?: string;
}

let orm: MikroORM;
let connection: Connection;
let client: Client;
let server: Server;
let base: string;
let dataDir: string;
const taskQueue = `rel-crash-${randomBytes(4).toString('hex')}`;
const workers = new Set<Spawned>();
/** How long each worker process took from spawn to polling its task queue (ms). */
const startupMs: number[] = [];

beforeAll(async () => {
  orm = await openTestOrm();
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-rel-crash-'));
  connection = await Connection.connect({ address: inject('temporalAddress') });
  client = new Client({ connection });
  const deps = testDeps(orm, { storageDir: path.join(dataDir, 'storage'), generations: temporalGenerationStarter(client, { taskQueue }) });
  const app = createTestApp({ deps, logger: silentLogger, publicBaseUrl: 'http://localhost' });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(async () => {
  for (const w of workers) {
    w.child.kill('SIGKILL');
    await w.exited;
  }
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await connection?.close();
  await orm?.close();
  await fs.rm(dataDir, { recursive: true, force: true });
});

async function startWorkerProcess(): Promise<Spawned> {
  const t0 = Date.now();
  const proc = spawnProject(entryArgs('worker'), {
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    TEMPORAL_TASK_QUEUE: taskQueue,
    DATA_DIR: dataDir,
  });
  workers.add(proc);
  void proc.exited.then(() => workers.delete(proc));
  await proc.waitFor(/Temporal worker running/, 120_000);
  startupMs.push(Date.now() - t0);
  return proc;
}

function pickKind(): Kind {
  const r = mixRand();
  if (r < 0.35) return 'succeed';
  if (r < 0.55) return 'fail';
  if (r < 0.8) return 'slow';
  if (r < 0.9) return 'cancel-queued';
  return 'cancel-running';
}

function settingsOf(kind: Kind): Record<string, unknown> {
  const seed = between(0, 1_000_000);
  switch (kind) {
    case 'succeed':
      return { size: 128, seed, delay_ms: between(0, 300) };
    case 'fail':
      return { size: 128, seed, delay_ms: between(0, 1000), fail: true };
    case 'slow':
      return { size: 128, seed, delay_ms: between(1000, 5000) };
    case 'cancel-queued':
      return { size: 128, seed, delay_ms: between(1000, 5000) };
    case 'cancel-running':
      return { size: 128, seed, delay_ms: between(4000, 8000) };
  }
}

describe('a worker process SIGKILLed again and again under a stream of jobs', () => {
  it('ends every job exactly once, with the money to match', async () => {
    const started = Date.now();
    const customers: { accountId: string; keys: string[] }[] = [];
    for (let a = 0; a < ACCOUNTS; a++) {
      const account = await makeAccount(orm, { coins: COINS });
      const keys: string[] = [];
      for (let k = 0; k < KEYS_PER_ACCOUNT; k++) keys.push((await makeKey(orm, account.id)).key);
      customers.push({ accountId: account.id, keys });
    }
    const keyOwner = new Map(customers.flatMap((c) => c.keys.map((k) => [k, c.accountId] as const)));
    const allKeys = [...keyOwner.keys()];

    const jobs: Job[] = [];
    const byId = new Map<string, Job>();
    const ended = new Set<string>();
    const activePerKey = new Map<string, number>(allKeys.map((k) => [k, 0]));
    let tooMany = 0;
    let cancelConflicts = 0;
    let kills = 0;
    let killsWhileRunning = 0;
    let stop = false;
    const errors: string[] = [];

    // Which jobs ended, from the database: frees their keys' slots for the stream.
    const refreshEnded = async () => {
      const open = jobs.filter((j) => j.id && !ended.has(j.id)).map((j) => j.id!);
      if (open.length === 0) return;
      const rows = await orm.em.fork().execute<{ id: string }[]>(
        `select id from generations where id in (${open.map(() => '?').join(',')}) and status not in ('queued', 'running')`,
        open,
      );
      for (const { id } of rows) {
        ended.add(id);
        const job = byId.get(id)!;
        activePerKey.set(job.key, activePerKey.get(job.key)! - 1);
      }
    };
    const poller = (async () => {
      while (!stop) {
        await refreshEnded().catch((err: unknown) => errors.push(`poll: ${String(err)}`));
        await sleep(300);
      }
    })();

    const cancelLater = async (job: Job, afterMs: number, once?: 'running') => {
      // A job to cancel while running: first wait (a while at most) until a worker began it.
      for (let waited = 0; once === 'running' && waited < 30_000; waited += 200) {
        const [row] = await orm.em.fork().execute<{ status: string }[]>('select status from generations where id = ?', [job.id]);
        if (row!.status !== 'queued') break;
        await sleep(200);
      }
      await sleep(afterMs);
      const seen = await getJson(`${base}/api/v1/generations/${job.id}`, { headers: bearer(job.key) });
      job.seenBeforeCancel = seen.body.status;
      const res = await getJson(`${base}/api/v1/generations/${job.id}/cancel`, { method: 'POST', headers: bearer(job.key) });
      if (res.status === 200) {
        expect(res.body.status).toBe('canceled');
        job.expected = 'canceled';
      } else if (res.status === 409 && res.body.error?.code === 'generation_finished') {
        // It ended first: its own ending stands.
        cancelConflicts++;
        const now = await getJson(`${base}/api/v1/generations/${job.id}`, { headers: bearer(job.key) });
        job.expected = now.body.status;
      } else {
        errors.push(`cancel ${job.id}: ${res.status} ${JSON.stringify(res.body)}`);
      }
    };
    const cancels: Promise<void>[] = [];

    // The stream: about JOBS/(KILLS+1) new jobs in each worker's life (and while none runs).
    const submitter = (async () => {
      for (let n = 0; n < JOBS; n++) {
        while (n >= Math.ceil(((kills + 1) * JOBS) / (KILLS + 1)) && kills < KILLS) await sleep(50);
        const kind = pickKind();
        const settings = settingsOf(kind);
        for (;;) {
          const key = allKeys.reduce((best, k) => (activePerKey.get(k)! < activePerKey.get(best)! ? k : best), allKeys[between(0, allKeys.length - 1, cancelRand)]!);
          if (activePerKey.get(key)! >= 5) {
            await sleep(100);
            continue;
          }
          activePerKey.set(key, activePerKey.get(key)! + 1);
          const res = await getJson(`${base}/api/v1/generations`, {
            method: 'POST',
            headers: { ...bearer(key), 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'mas/image-demo', prompt: `crash stream ${n}`, settings }),
          });
          if (res.status === 429) {
            // Our count of the key's open jobs lagged the database's: try again shortly.
            tooMany++;
            activePerKey.set(key, activePerKey.get(key)! - 1);
            await sleep(200);
            continue;
          }
          if (res.status !== 202) {
            errors.push(`submit ${n}: ${res.status} ${JSON.stringify(res.body)}`);
            activePerKey.set(key, activePerKey.get(key)! - 1);
            break;
          }
          const job: Job = { n, kind, key, accountId: keyOwner.get(key)!, id: res.body.id };
          if (kind === 'succeed' || kind === 'slow') job.expected = 'succeeded';
          if (kind === 'fail') job.expected = 'failed';
          jobs.push(job);
          byId.set(job.id!, job);
          if (kind === 'cancel-queued') cancels.push(cancelLater(job, 0));
          if (kind === 'cancel-running') cancels.push(cancelLater(job, between(0, 1500, cancelRand), 'running'));
          break;
        }
        await sleep(between(10, 150, faultRand));
      }
    })();

    // The faults: a worker lives a random while, then is SIGKILLed; its replacement was spawned
    // as it began (a worker takes seconds to start), so it comes up during that life or after
    // the kill, and jobs wait for it, queued or mid-step.
    let worker = await startWorkerProcess();
    let workerStarts = 1;
    let replacementUp = 0;
    while (kills < KILLS) {
      let ready = false;
      const next = startWorkerProcess().then((w) => {
        ready = true;
        return w;
      });
      next.catch(() => undefined);
      await sleep(between(1000, 5000, faultRand));
      const [busy] = await orm.em.fork().execute<{ n: number }[]>(
        `select count(*)::int as n from generations where status = 'running' and id in (${jobs.length ? jobs.map(() => '?').join(',') : `''`})`,
        jobs.map((j) => j.id!),
      );
      if (ready) replacementUp++;
      worker.child.kill('SIGKILL');
      await worker.exited;
      kills++;
      if (busy!.n > 0) killsWhileRunning++;
      worker = await next;
      workerStarts++;
    }
    await submitter;
    await Promise.all(cancels);
    const killPhaseSeconds = (Date.now() - started) / 1000;

    // Every job ends, on the last worker.
    const deadline = Date.now() + 300_000;
    while (ended.size < jobs.length && Date.now() < deadline) await sleep(500);
    stop = true;
    await poller;
    await refreshEnded();
    expect(errors).toEqual([]);
    expect(jobs.length).toBe(JOBS);
    expect(ended.size).toBe(JOBS);

    // Every workflow closed the way its job ended.
    const closedAs = new Map<string, string>();
    const wfDeadline = Date.now() + 180_000;
    for (const job of jobs) {
      for (;;) {
        const status = (await client.workflow.getHandle(job.id!).describe()).status.name;
        if (status !== 'RUNNING' || Date.now() > wfDeadline) {
          closedAs.set(job.id!, status);
          break;
        }
        await sleep(500);
      }
    }
    // What the kills cost, from the histories: workflow tasks that timed out on a dead worker,
    // and activity attempts retried, by why the previous attempt ended. A dead worker's transfer
    // must be noticed by its heartbeat timeout, not after the 5-minute start-to-close timeout.
    const TIMEOUTS: Record<number, string> = { 1: 'start-to-close timeout', 2: 'schedule-to-start timeout', 3: 'schedule-to-close timeout', 4: 'heartbeat timeout' };
    let workflowTaskTimeouts = 0;
    const activityRetries: Record<string, number> = {};
    for (const job of jobs) {
      const history = await client.workflow.getHandle(job.id!).fetchHistory();
      const scheduled = new Map<string, string>();
      for (const event of history.events ?? []) {
        if (event.workflowTaskTimedOutEventAttributes) workflowTaskTimeouts++;
        const sched = event.activityTaskScheduledEventAttributes;
        if (sched) scheduled.set(String(event.eventId), sched.activityType?.name ?? '?');
        const start = event.activityTaskStartedEventAttributes;
        if (start && (start.attempt ?? 1) > 1) {
          const type = start.lastFailure?.timeoutFailureInfo?.timeoutType;
          const label = `${scheduled.get(String(start.scheduledEventId))} after a ${type ? (TIMEOUTS[Number(type)] ?? `timeout ${type}`) : 'failure'}`;
          activityRetries[label] = (activityRetries[label] ?? 0) + start.attempt! - 1;
        }
      }
    }
    expect(Object.keys(activityRetries).filter((label) => label.includes('start-to-close'))).toEqual([]);

    worker.child.kill('SIGTERM');
    await worker.exited;
    const totalSeconds = (Date.now() - started) / 1000;

    // The money, per job: its hold's ledger rows.
    const rows = await orm.em.fork().execute<
      {
        id: string;
        status: string;
        price: string;
        cost: string | null;
        hold_status: string;
        hold_amount: string;
        reservations: number;
        captures: number;
        captured: string;
        held_releases: number;
        released_held: string;
        refunded: string;
        refund_rows: number;
        held_net: string;
        took: number | null;
      }[]
    >(
      `select g.id, g.status, g.price_micro::text as price, g.cost_micro::text as cost, h.status as hold_status, h.amount_micro::text as hold_amount,
              count(le.*) filter (where le.kind = 'reservation' and le.pocket = 'held')::int as reservations,
              count(le.*) filter (where le.kind = 'capture')::int as captures,
              coalesce(-sum(le.amount_micro) filter (where le.kind = 'capture'), 0)::text as captured,
              count(le.*) filter (where le.kind = 'release' and le.pocket = 'held')::int as held_releases,
              coalesce(-sum(le.amount_micro) filter (where le.kind = 'release' and le.pocket = 'held'), 0)::text as released_held,
              coalesce(sum(le.amount_micro) filter (where le.kind = 'release' and le.pocket <> 'held'), 0)::text as refunded,
              (select count(*)::int from ledger_entries r where r.kind = 'refund' and r.reference = g.id) as refund_rows,
              coalesce(sum(le.amount_micro) filter (where le.pocket = 'held'), 0)::text as held_net,
              extract(epoch from (g.completed_at - g.created_at))::float8 as took
       from generations g join holds h on h.id = g.hold_id left join ledger_entries le on le.hold_id = g.hold_id
       where g.id in (${jobs.map(() => '?').join(',')})
       group by g.id, h.id`,
      jobs.map((j) => j.id!),
    );
    expect(rows.length).toBe(JOBS);

    const byStatus: Record<string, number> = { succeeded: 0, failed: 0, canceled: 0 };
    const byKind: Record<Kind, number> = { succeed: 0, fail: 0, slow: 0, 'cancel-queued': 0, 'cancel-running': 0 };
    let endedOnce = 0;
    let wrongEnding = 0;
    let doubledRefunds = 0;
    let missingCharges = 0;
    let heldLeft = 0;
    let workflowMismatch = 0;
    const problems: string[] = [];
    const wfFor = { succeeded: 'COMPLETED', failed: 'FAILED', canceled: 'CANCELLED' } as Record<string, string>;
    for (const row of rows) {
      const job = byId.get(row.id)!;
      byKind[job.kind]++;
      byStatus[row.status] = (byStatus[row.status] ?? 0) + 1;
      const price = BigInt(row.price);
      const once = row.reservations === 1 && row.captures + row.held_releases === 1 && BigInt(row.held_net) === 0n;
      if (once) endedOnce++;
      else problems.push(`${row.id}: not ended exactly once ${JSON.stringify(row)}`);
      if (BigInt(row.held_net) !== 0n) heldLeft++;
      if (row.status !== job.expected) {
        wrongEnding++;
        problems.push(`${row.id} (${job.kind}): ${row.status}, expected ${job.expected}`);
      }
      if (row.status === 'succeeded') {
        if (!(row.captures === 1 && BigInt(row.captured) === price && row.hold_status === 'settled' && BigInt(row.cost ?? '0') === price)) {
          missingCharges++;
          problems.push(`${row.id}: charge ${JSON.stringify(row)}`);
        }
        if (BigInt(row.refunded) !== 0n || row.held_releases !== 0 || row.refund_rows !== 0) {
          doubledRefunds++;
          problems.push(`${row.id}: refunded although charged ${JSON.stringify(row)}`);
        }
      } else {
        if (row.captures !== 0 || row.hold_status !== 'released') {
          missingCharges++;
          problems.push(`${row.id}: charged although ${row.status} ${JSON.stringify(row)}`);
        }
        if (row.held_releases !== 1 || BigInt(row.released_held) !== price || BigInt(row.refunded) !== price || row.refund_rows !== 0) {
          doubledRefunds++;
          problems.push(`${row.id}: refund not exactly the price, once ${JSON.stringify(row)}`);
        }
      }
      if (closedAs.get(row.id) !== wfFor[row.status]) {
        workflowMismatch++;
        problems.push(`${row.id}: job ${row.status}, workflow ${closedAs.get(row.id)}`);
      }
    }
    expect(problems).toEqual([]);

    // The money, per account: nothing held, the ledger sums to the balance, and the balance is
    // what was put in less exactly what the succeeded jobs cost.
    let settledAccounts = 0;
    for (const c of customers) {
      const state = await expectSettledWallet(orm, c.accountId);
      const charged = rows.filter((r) => byId.get(r.id)!.accountId === c.accountId && r.status === 'succeeded').reduce((s, r) => s + BigInt(r.price), 0n);
      expect(state.balance.subscription + state.balance.purchased).toBe(parseCoins(COINS) - charged);
      settledAccounts++;
    }

    const cancelSeen = (s: string) => jobs.filter((j) => j.kind.startsWith('cancel') && j.seenBeforeCancel === s && j.expected === 'canceled').length;
    await reportSection(
      'worker-crashes',
      2,
      `## Worker crashes

${FULL ? 'Full run' : 'CI run'} (seed ${SEED}): a worker process (\`worker.ts\`, its own task queue) ran a stream of ${jobs.length} jobs on \`mas/image-demo\`, submitted through the REST API by ${allKeys.length} keys of ${customers.length} accounts, and was killed with SIGKILL and replaced ${kills} times (${killsWhileRunning} of them with jobs running; ${workerStarts} worker processes in all; each replacement was spawned as its predecessor began and was already polling at ${replacementUp} of the kills; a worker was ready to poll ${Math.round(startupMs.reduce((a, b) => a + b, 0) / startupMs.length / 100) / 10} s after its spawn on average).

${table(['Jobs submitted', 'succeeding', 'failing (fail: true)', 'slow (1–5 s)', 'cancelled right after submission', 'cancelled while running'], [[jobs.length, byKind.succeed, byKind.fail, byKind.slow, byKind['cancel-queued'], byKind['cancel-running']]])}

${table(['Final status', 'Jobs'], [['succeeded', byStatus.succeeded!], ['failed', byStatus.failed!], ['canceled', byStatus.canceled!]])}

Cancel requests: ${cancelSeen('queued')} cancelled a queued job, ${cancelSeen('running')} a running one, ${cancelConflicts} came after the job ended (409, its ending kept). The stream met ${tooMany} answers 429 (five unfinished jobs per key) and retried.

${table(['Check', 'Measured'], [
        ['Worker SIGKILLs', kills],
        ['Jobs ended exactly once (one reservation; one capture or one release of the held coins)', `${endedOnce} of ${rows.length}`],
        ['Jobs whose ending differs from the expected one', wrongEnding],
        ['Workflows closed otherwise than their job', workflowMismatch],
        ['Charges missing or wrong (succeeded without one capture of its price, or charged though not succeeded)', missingCharges],
        ['Refunds doubled or short (other than one release of the full price)', doubledRefunds],
        ['Holds with coins still held', heldLeft],
        ['Accounts settled (no held coins, ledger sums to balance, balance = top-up − captures)', `${settledAccounts} of ${customers.length}`],
        ['Workflow tasks timed out on a killed worker (then run by another)', workflowTaskTimeouts],
        ['Activity attempts retried (regular activities: the result transfer)', Object.values(activityRetries).reduce((a, b) => a + b, 0)],
        ...Object.entries(activityRetries).map(([label, n]) => [`Activity attempts retried: ${label}`, n]),
        ['Slowest job, from submission to its end (s)', Math.max(...rows.map((r) => r.took ?? 0)).toFixed(0)],
        ['Time with kills (s)', killPhaseSeconds.toFixed(0)],
        ['Total time until every job and workflow ended (s)', totalSeconds.toFixed(0)],
      ])}
`,
    );
  }, 900_000);
});
