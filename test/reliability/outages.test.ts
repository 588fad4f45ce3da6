import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, openSync, closeSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { Connection } from '@temporalio/client';
import { afterAll, describe, expect, inject, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../adapters/embedded/postgres.ts';
import { ensureTemporalCli } from '../../adapters/embedded/temporal-cli.ts';
import { openOrm } from '../../core/orm.ts';
import { SEARCH_ATTRIBUTES } from '../../workflows/shared.ts';
import { createFreshDatabase, makeKey, silentLogger, walletInvariants } from '../support/db.ts';
import { freePort, isRunning, serverArgs, spawnProject, type Spawned, entryArgs } from '../support/process.ts';
import { FULL, reportSection, scale, table } from './support/results.ts';

/**
 * Issue 20, part 4: dependency outages under load, with the real API process (main.ts).
 * (a) Its PostgreSQL (one of this test's own, on a fixed port) is stopped for 10 s (fast
 *     shutdown of its postmaster) while clients send chats and reads: the API answers 503 in
 *     the error shape, never a 500, never later than a bound; /readyz says not ready; once the
 *     database is back the same API process serves again, and every chat answered 200 has its
 *     capture in the ledger.
 * (b) Its Temporal server (a dev server of this test's own, on a fixed port with a database
 *     file) is stopped (SIGTERM) and started again with the same state while media jobs run on
 *     a separate worker: every job finishes, or fails with a full refund; wallets sum up.
 */
const OUTAGE_MS = 10_000;
const CLIENTS = scale(4, 8);
/** No answer may take longer than this, outage or not. */
const ANSWER_BOUND_MS = 15_000;
const JOBS_AT_RESTART = scale(16, 40);
const TEMPORAL_DOWN_MS = scale(5_000, 15_000);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function startApi(env: Record<string, string>): Promise<{ proc: Spawned; base: string; key: string }> {
  const port = await freePort();
  const proc = spawnProject(serverArgs(), {
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    RATE_LIMIT_PER_MINUTE: '1000000',
    DEMO_COINS: '100000',
    HOLD_TTL_SECONDS: '10',
    HOLD_SWEEP_INTERVAL_SECONDS: '2',
    ...env,
  });
  cleanups.push(async () => {
    proc.child.kill('SIGKILL');
    await proc.exited;
  });
  await proc.waitFor(/listening on/, 120_000);
  const key = (await proc.waitFor(/\n {2}(mas_[0-9A-Za-z]+)\n/))[1]!;
  return { proc, base: `http://127.0.0.1:${port}`, key };
}

interface Call {
  kind: 'chat' | 'read' | 'readyz' | 'submit' | 'poll';
  start: number;
  end: number;
  status: number;
  body: any;
  error?: string;
}

/** One request, timed; status 0 when it got no answer (a connection error or the bound). */
async function call(kind: Call['kind'], url: string, init: RequestInit = {}): Promise<Call> {
  const start = Date.now();
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(60_000) });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // kept as text
    }
    return { kind, start, end: Date.now(), status: res.status, body };
  } catch (err) {
    return { kind, start, end: Date.now(), status: 0, body: undefined, error: String(err) };
  }
}

const hasErrorShape = (body: any) =>
  typeof body?.error?.message === 'string' && typeof body.error.type === 'string' && typeof body.error.code === 'string';

const figures: { pg?: string; temporal?: string } = {};
afterAll(async () => {
  if (!figures.pg || !figures.temporal) return;
  await reportSection('outages', 4, `## Dependency outages\n\n${FULL ? 'Full run' : 'CI run'}.\n\n${figures.pg}\n\n${figures.temporal}\n`);
});

describe('PostgreSQL stopped for 10 s under load', () => {
  it('answers 503 in the error shape while it is down, recovers without a restart, loses no ledger row', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-rel-pg-outage-'));
    cleanups.push(() => fs.rm(dir, { recursive: true, force: true }));
    const pgDir = path.join(dir, 'pg');
    let db: EmbeddedPostgres = await startEmbeddedPostgres({ dataDir: pgDir, database: 'mas_outage', logger: silentLogger });
    cleanups.push(() => db.release());
    const port = new URL(db.url).port;
    const api = await startApi({
      DATABASE_URL: db.url,
      DATA_DIR: path.join(dir, 'data'),
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      TEMPORAL_TASK_QUEUE: `rel-pg-outage-${process.pid}`,
    });
    const auth = { authorization: `Bearer ${api.key}` };

    const calls: Call[] = [];
    let stop = false;
    const clients = Array.from({ length: CLIENTS }, async (_, c) => {
      for (let i = 0; !stop; i++) {
        if ((i + c) % 2 === 0) {
          calls.push(
            await call('chat', `${api.base}/api/v1/chat/completions`, {
              method: 'POST',
              headers: { ...auth, 'content-type': 'application/json' },
              body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: `outage ${c} ${i}` }], max_tokens: 8 }),
            }),
          );
        } else {
          calls.push(await call('read', `${api.base}/api/v1/${i % 4 === 1 ? 'balance' : 'wallet/history'}`, { headers: auth }));
        }
        await sleep(50);
      }
    });
    const readyz = (async () => {
      while (!stop) {
        calls.push(await call('readyz', `${api.base}/readyz`));
        await sleep(250);
      }
    })();

    await sleep(3_000);
    // Fast shutdown of the postmaster (SIGINT), as `pg_ctl stop -m fast` does.
    const pidFile = path.join(pgDir, 'postgres', 'postmaster.pid');
    const postmaster = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
    const stoppedAt = Date.now();
    process.kill(postmaster, 'SIGINT');
    while (isRunning(postmaster)) await sleep(50);
    const goneAt = Date.now();
    await sleep(Math.max(0, stoppedAt + OUTAGE_MS - Date.now()));
    const restartAt = Date.now();
    db = await startEmbeddedPostgres({ dataDir: pgDir, database: 'mas_outage', logger: silentLogger });
    const upAt = Date.now();
    expect(new URL(db.url).port).toBe(port);

    // Until a chat and a read succeed again, then 5 s more of load.
    let recoveredAt = 0;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline && !recoveredAt; await sleep(100)) {
      const after = calls.filter((c) => c.start >= upAt && c.status === 200);
      if (after.some((c) => c.kind === 'chat') && after.some((c) => c.kind === 'read') && after.some((c) => c.kind === 'readyz')) {
        recoveredAt = Math.max(...['chat', 'read', 'readyz'].map((k) => after.find((c) => c.kind === k)!.end));
      }
    }
    expect(recoveredAt, 'the API did not recover').toBeGreaterThan(0);
    await sleep(5_000);
    stop = true;
    await Promise.all([...clients, readyz]);

    const bad = calls.filter((c) => c.status !== 200 && c.status !== 503);
    expect(bad.map((c) => `${c.kind} ${c.status} ${c.error ?? JSON.stringify(c.body)}`)).toEqual([]);
    const unshaped = calls.filter((c) => c.status === 503 && c.kind !== 'readyz' && !hasErrorShape(c.body));
    expect(unshaped.map((c) => JSON.stringify(c.body))).toEqual([]);
    const slowest = Math.max(...calls.map((c) => c.end - c.start));
    expect(slowest).toBeLessThan(ANSWER_BOUND_MS);
    // Sent while it was down (from the postmaster's exit to its restart).
    const during = calls.filter((c) => c.start >= goneAt && c.end <= restartAt);
    const duringApi = during.filter((c) => c.kind !== 'readyz');
    const duringReadyz = during.filter((c) => c.kind === 'readyz');
    expect(duringApi.length).toBeGreaterThan(0);
    expect(duringApi.filter((c) => c.status !== 503).map((c) => `${c.kind} ${c.status}`)).toEqual([]);
    expect(duringReadyz.length).toBeGreaterThan(0);
    expect(duringReadyz.filter((c) => c.status !== 503 || c.body?.error?.code !== 'database_unreachable').map((c) => JSON.stringify(c.body))).toEqual([]);
    // Once recovered, everything succeeds.
    const afterRecovery = calls.filter((c) => c.start > recoveredAt + 1_000);
    expect(afterRecovery.length).toBeGreaterThan(0);
    expect(afterRecovery.filter((c) => c.status !== 200).map((c) => `${c.kind} ${c.status} ${JSON.stringify(c.body)}`)).toEqual([]);
    expect(api.proc.child.exitCode).toBeNull();

    // No ledger row lost: each chat answered 200 has its capture; every hold ends (a chat in
    // flight at the stop leaves one open for the sweep); the wallet sums up.
    const answered = calls.filter((c) => c.kind === 'chat' && c.status === 200).map((c) => c.body.id as string);
    const sql = new pg.Client(db.url);
    await sql.connect();
    cleanups.push(() => sql.end());
    const captured = (
      await sql.query<{ reference: string }>(`select distinct reference from ledger_entries where kind = 'capture' and reference = any($1)`, [answered])
    ).rows.length;
    expect(captured).toBe(answered.length);
    const accountId = (await sql.query<{ id: string }>(`select id from accounts where email = 'demo@example.com'`)).rows[0]!.id;
    let openHolds = -1;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(500)) {
      openHolds = (await sql.query<{ n: number }>(`select count(*)::int as n from holds where status = 'open'`)).rows[0]!.n;
      if (openHolds === 0) break;
    }
    expect(openHolds).toBe(0);
    const orm: MikroORM = await openOrm({ url: db.url, poolMax: 2 });
    const wallet = await walletInvariants(orm, accountId);
    await orm.close();
    expect(wallet.balance.held).toBe(0n);
    expect(wallet.ledgerTotal).toBe(wallet.balance.subscription + wallet.balance.purchased);
    const released = (await sql.query<{ n: number }>(`select count(*)::int as n from holds where status = 'released'`)).rows[0]!.n;

    const count = (cs: Call[], kind: Call['kind'], status: number) => cs.filter((c) => c.kind === kind && c.status === status).length;
    const codes = [...new Set(duringApi.map((c) => c.body?.error?.code as string))].join(', ');
    const s = (ms: number) => (ms / 1000).toFixed(1);
    figures.pg = `### PostgreSQL stopped for ${OUTAGE_MS / 1000} s

The API (\`main.ts\`) on a PostgreSQL of the test's own; ${CLIENTS} clients sent non-streamed chats (\`mas/echo\`) and reads (balance, wallet history) back to back, and one asked \`/readyz\` every 250 ms. The postmaster got SIGINT (fast shutdown), was gone after ${s(goneAt - stoppedAt)} s, and was started again on the same port ${s(restartAt - stoppedAt)} s after the stop.

${table(['While down', 'chats', 'reads', '/readyz'], [
  ['Requests sent and answered', count(during, 'chat', 503) + count(during, 'chat', 200), count(during, 'read', 503) + count(during, 'read', 200), duringReadyz.length],
  ['… 503 in the error shape', count(during, 'chat', 503), count(during, 'read', 503), count(during, 'readyz', 503)],
  ['… any other answer', count(during, 'chat', 200), count(during, 'read', 200), duringReadyz.filter((c) => c.status !== 503).length],
])}

${table(['Check', 'Measured'], [
  ['Requests in all', calls.length],
  ['Answers 500, or no answer', bad.length],
  ['503 answers not in the `{error:{message,type,code}}` shape', unshaped.length],
  ['Error codes while down', codes],
  ['Slowest answer, whole run (s)', s(slowest)],
  ['Time from the restart of PostgreSQL to a chat, a read and /readyz answered 200 again (s)', s(recoveredAt - upAt)],
  ['Requests after recovery, and how many failed', `${afterRecovery.length}, ${afterRecovery.filter((c) => c.status !== 200).length}`],
  ['API process restarted', 'no (same process throughout)'],
  ['Chats answered 200', answered.length],
  ['… with their capture in the ledger', captured],
  ['Holds released by the sweep (chats in flight at the stop)', released],
  ['Holds open at the end / held coins / ledger − balance', `${openHolds} / ${wallet.balance.held} / ${wallet.ledgerTotal - (wallet.balance.subscription + wallet.balance.purchased)}`],
])}`;
  }, 300_000);
});

/** A Temporal dev server of this test's own: a fixed port and a database file, so it can be stopped and started again. */
async function temporalServer(dir: string) {
  const cli = await ensureTemporalCli(silentLogger);
  const port = await freePort();
  const uiPort = await freePort();
  const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(port), '--ui-port', String(uiPort),
    '--db-filename', path.join(dir, 'temporal.db'), '--namespace', 'default', '--log-level', 'warn', '--sqlite-pragma', 'journal_mode=wal',
    ...Object.values(SEARCH_ATTRIBUTES).flatMap((k) => ['--search-attribute', `${k.name}=Keyword`])];
  let child: ChildProcess | undefined;
  const address = `127.0.0.1:${port}`;
  const start = async () => {
    const log = openSync(path.join(dir, 'server.log'), 'a');
    child = spawn(cli, args, { stdio: ['ignore', log, log] });
    closeSync(log);
    for (let i = 0; ; i++) {
      try {
        const connection = await Connection.connect({ address, connectTimeout: 1000 });
        try {
          await connection.workflowService.describeNamespace({ namespace: 'default' });
          return;
        } finally {
          await connection.close();
        }
      } catch (err) {
        if (i > 240 || child.exitCode !== null) throw new Error(`Temporal did not start: ${String(err)}\n${await fs.readFile(path.join(dir, 'server.log'), 'utf8')}`);
        await sleep(250);
      }
    }
  };
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill(signal);
    await Promise.race([exited, sleep(20_000)]);
    if (c.exitCode === null && c.signalCode === null) {
      c.kill('SIGKILL');
      await exited;
    }
  };
  return { address, start, stop };
}

describe('the Temporal server restarted under load', () => {
  it('lets the jobs running at the restart finish, or fail with a full refund', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-rel-temporal-restart-'));
    cleanups.push(() => fs.rm(dir, { recursive: true, force: true }));
    const temporal = await temporalServer(dir);
    cleanups.push(() => temporal.stop('SIGKILL'));
    await temporal.start();
    expect(existsSync(path.join(dir, 'temporal.db'))).toBe(true);
    const fresh = await createFreshDatabase();
    cleanups.push(() => fresh.drop());
    const taskQueue = `rel-temporal-restart-${process.pid}`;
    const common = { DATABASE_URL: fresh.url, DATA_DIR: path.join(dir, 'data'), TEMPORAL_ADDRESS: temporal.address, TEMPORAL_TASK_QUEUE: taskQueue };
    const api = await startApi({ ...common, RUN_WORKER: 'false' });
    const worker = spawnProject(entryArgs('worker'), common);
    cleanups.push(async () => {
      worker.child.kill('SIGKILL');
      await worker.exited;
    });
    await worker.waitFor(/Temporal worker running/, 120_000);

    const orm: MikroORM = await openOrm({ url: fresh.url, poolMax: 2 });
    cleanups.push(() => orm.close());
    const accountId = (await orm.em.fork().execute<{ id: string }[]>(`select id from accounts where email = 'demo@example.com'`))[0]!.id;
    const keys = [api.key];
    while (keys.length < Math.ceil(JOBS_AT_RESTART / 5) + 2) keys.push((await makeKey(orm, accountId)).key);

    const calls: Call[] = [];
    const jobIds: string[] = [];
    let n = 0;
    const submit = async (key: string, delayMs: number) => {
      const c = await call('submit', `${api.base}/api/v1/generations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mas/image-demo', prompt: `temporal restart ${n++}`, settings: { size: 128, seed: n, delay_ms: delayMs } }),
      });
      calls.push(c);
      if (c.status === 202) jobIds.push(c.body.id);
      return c;
    };
    // The jobs running at the restart: each takes 4–10 s.
    const initial = await Promise.all(Array.from({ length: JOBS_AT_RESTART }, (_, i) => submit(keys[i % (keys.length - 2)]!, 4_000 + ((i * 397) % 6_000))));
    expect(initial.map((c) => c.status)).toEqual(initial.map(() => 202));
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(200)) {
      const [row] = await orm.em.fork().execute<{ n: number }[]>(`select count(*)::int as n from generations where status = 'running'`);
      if (row!.n >= JOBS_AT_RESTART / 2) break;
    }
    const runningAtRestart = (await orm.em.fork().execute<{ n: number }[]>(`select count(*)::int as n from generations where status = 'running'`))[0]!.n;

    // Load through the restart: new jobs from the two spare keys, and reads of the running ones.
    let stop = false;
    // Three clients: one submitting (the two spare keys), two reading.
    const load = Promise.all(
      [0, 1, 2].map(async (client) => {
        for (let i = 0; !stop; i++) {
          if (client === 0) await submit(keys[keys.length - 1 - (i % 2)]!, 500);
          else calls.push(await call('poll', `${api.base}/api/v1/generations/${jobIds[(i * 2 + client) % jobIds.length]}`, { headers: { authorization: `Bearer ${keys[0]}` } }));
          await sleep(150);
        }
      }),
    );

    const stoppedAt = Date.now();
    await temporal.stop('SIGTERM');
    const goneAt = Date.now();
    await sleep(TEMPORAL_DOWN_MS);
    const restartAt = Date.now();
    await temporal.start();
    const upAt = Date.now();
    await sleep(5_000);
    stop = true;
    await load;

    // Every accepted job ends.
    let rows: { id: string; status: string; price: string; hold_status: string; captured: string; refunded: string; held_net: string }[] = [];
    for (const deadline = Date.now() + 240_000; Date.now() < deadline; await sleep(1_000)) {
      rows = await orm.em.fork().execute(
        `select g.id, g.status, g.price_micro::text as price, h.status as hold_status,
                coalesce(-sum(le.amount_micro) filter (where le.kind = 'capture'), 0)::text as captured,
                coalesce(sum(le.amount_micro) filter (where le.kind = 'release' and le.pocket <> 'held'), 0)::text as refunded,
                coalesce(sum(le.amount_micro) filter (where le.pocket = 'held'), 0)::text as held_net
         from generations g join holds h on h.id = g.hold_id left join ledger_entries le on le.hold_id = g.hold_id
         where g.id in (${jobIds.map(() => '?').join(',')}) group by g.id, h.id`,
        jobIds,
      );
      if (rows.length === jobIds.length && rows.every((r) => r.status === 'succeeded' || r.status === 'failed' || r.status === 'canceled')) break;
    }
    expect(rows.length).toBe(jobIds.length);
    expect(rows.filter((r) => !['succeeded', 'failed'].includes(r.status)).map((r) => `${r.id} ${r.status}`)).toEqual([]);
    const wrongMoney = rows.filter((r) =>
      r.status === 'succeeded'
        ? !(r.hold_status === 'settled' && r.captured === r.price && r.refunded === '0' && r.held_net === '0')
        : !(r.hold_status === 'released' && r.captured === '0' && r.refunded === r.price && r.held_net === '0'),
    );
    expect(wrongMoney.map((r) => JSON.stringify(r))).toEqual([]);
    const wallet = await walletInvariants(orm, accountId);
    expect(wallet.openHolds).toBe(0n);
    expect(wallet.balance.held).toBe(0n);
    expect(wallet.ledgerTotal).toBe(wallet.balance.subscription + wallet.balance.purchased);

    // The API never answered 500 or hung; what it refused while Temporal was down said so.
    const bad = calls.filter((c) => ![200, 202, 429, 503].includes(c.status));
    expect(bad.map((c) => `${c.kind} ${c.status} ${c.error ?? JSON.stringify(c.body)}`)).toEqual([]);
    const unshaped = calls.filter((c) => c.status === 503 && !hasErrorShape(c.body));
    expect(unshaped.map((c) => JSON.stringify(c.body))).toEqual([]);
    // A job submitted just before the stop waits for the server to come back (the client retries the start).
    const slowest = Math.max(...calls.map((c) => c.end - c.start));
    expect(slowest).toBeLessThan(TEMPORAL_DOWN_MS + ANSWER_BOUND_MS);
    expect(api.proc.child.exitCode).toBeNull();
    expect(worker.child.exitCode).toBeNull();

    const initialIds = new Set(initial.map((c) => c.body.id as string));
    const of = (ids: Set<string> | undefined, status: string) => rows.filter((r) => (!ids || ids.has(r.id)) && r.status === status).length;
    const submits = calls.filter((c) => c.kind === 'submit' && !initialIds.has(c.body?.id));
    const down = (c: Call) => c.start >= goneAt && c.start < restartAt;
    const s = (ms: number) => (ms / 1000).toFixed(1);
    figures.temporal = `### Temporal server restarted

The API (\`main.ts\`, RUN_WORKER=false) and a worker (\`worker.ts\`) on a Temporal dev server of the test's own (fixed port, SQLite file). ${JOBS_AT_RESTART} jobs of 4–10 s were submitted (\`mas/image-demo\`); with ${runningAtRestart} of them running, the server got SIGTERM (gone after ${s(goneAt - stoppedAt)} s), stayed down ${s(restartAt - goneAt)} s and was started again with the same arguments (ready after ${s(upAt - restartAt)} s). Meanwhile clients kept submitting jobs and reading them.

${table(['Check', 'Measured'], [
  ['Jobs running or queued at the restart', JOBS_AT_RESTART],
  ['… succeeded (charged their price once)', of(initialIds, 'succeeded')],
  ['… failed (refunded in full)', of(initialIds, 'failed')],
  ['Jobs submitted around the restart: accepted / refused 503 / 429', `${submits.filter((c) => c.status === 202).length} / ${submits.filter((c) => c.status === 503).length} / ${submits.filter((c) => c.status === 429).length}`],
  ['… of the accepted: succeeded / failed', `${rows.filter((r) => !initialIds.has(r.id) && r.status === 'succeeded').length} / ${rows.filter((r) => !initialIds.has(r.id) && r.status === 'failed').length}`],
  ['Requests sent while Temporal was down: submits answered 202 / 503, reads answered 200 / 503', `${calls.filter((c) => down(c) && c.kind === 'submit' && c.status === 202).length} / ${calls.filter((c) => down(c) && c.kind === 'submit' && c.status === 503).length}, ${calls.filter((c) => down(c) && c.kind === 'poll' && c.status === 200).length} / ${calls.filter((c) => down(c) && c.kind === 'poll' && c.status === 503).length}`],
  ['Slowest answer to a request sent while Temporal was down (s)', s(Math.max(0, ...calls.filter(down).map((c) => c.end - c.start)))],
  ['Answers 500, or no answer', bad.length],
  ['Slowest answer (a submission sent just before the stop waits for the server to be back) (s)', s(slowest)],
  ['Jobs whose money is wrong (not one capture of the price, or not a full refund)', wrongMoney.length],
  ['Wallet: open holds / held coins / ledger − balance', `${wallet.openHolds} / ${wallet.balance.held} / ${wallet.ledgerTotal - (wallet.balance.subscription + wallet.balance.purchased)}`],
  ['API and worker processes restarted', 'no'],
])}`;
  }, 400_000);
});
