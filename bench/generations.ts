import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import pg from 'pg';
import fsSync from 'node:fs';
import { freePort, machine, median, percentile, processTree, serviceArgs, start, stealMeter, type Proc } from './support.ts';
import { entryArgs } from '../scripts/support/process.ts';

/**
 * npm run bench:generations — media jobs on the `local` provider with no artificial delay,
 * end to end through the API, the embedded Temporal dev server and the worker process
 * (`npm start`'s child), as production runs them (the built JavaScript when there is one).
 *
 * Two phases per run, each on fresh jobs:
 * - throughput: JOBS jobs in lanes (5 per key, the per-key limit, over KEYS keys, so 50 in
 *   flight); each lane submits with `Prefer: wait=60` and submits again when its job ended.
 *   Jobs per second from the first submit to the last completion.
 * - latency: RATE_JOBS jobs submitted at a steady RATE per second (open loop, as independent
 *   clients would), submit-to-succeeded p50 and p99 at that rate.
 * Submit-to-succeeded times come from the database (`completed_at - created_at`), so they do
 * not include the client's own waiting. RUNS runs (each a fresh server and data directory);
 * the table shows each run and the medians.
 *   RUNS (3), JOBS (400), KEYS (10), RATE (50), RATE_JOBS (500), SERVER_NODE_FLAGS (e.g. --cpu-prof)
 */
const RUNS = Number(process.env.RUNS ?? 3);
const JOBS = Number(process.env.JOBS ?? 400);
const KEYS = Number(process.env.KEYS ?? 10);
const RATE = Number(process.env.RATE ?? 50);
const RATE_JOBS = Number(process.env.RATE_JOBS ?? 500);

interface RunResult {
  throughput: { jobs: number; succeeded: number; jobsPerSecond: number; p50: number; p99: number };
  latency: { jobs: number; succeeded: number; jobsPerSecond: number; p50: number; p99: number; queuedP50: number; runningP50: number; refused: number };
  historyEvents: number;
  historyTypes: string;
  /** The throughput phase's work per job: PostgreSQL transactions (the mas database's commits and rollbacks), CPU ms per process kind. */
  work: { transactionsPerJob: number; cpuMsPerJob: Record<string, number> };
  peakRssMiB: number;
  /** The worker process's (npm start runs it as a child of the API process). */
  workerPeakRssMiB: number;
}

async function run(): Promise<RunResult> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-gen-'));
  const procs: Proc[] = [];
  try {
    const port = await freePort();
    const env = { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '1000000000', LOG_LEVEL: 'warn', DEMO_COINS: '0' };
    const flags = (process.env.SERVER_NODE_FLAGS ?? '').split(' ').filter(Boolean);
    const server = start(process.execPath, serviceArgs('main', flags), env);
    procs.push(server);
    await server.waitFor(/listening on/);
    const cli = async (...args: string[]) => {
      const p = start(process.execPath, [...entryArgs('mas'), ...args, '--json'], env);
      return JSON.parse((await p.waitFor(/\{.*\}/))[0]) as Record<string, unknown>;
    };
    await cli('account', 'create', '--email', 'bench@example.com');
    await cli('wallet', 'topup', '--account', 'bench@example.com', '--coins', '100000000');
    const keys: string[] = [];
    for (let i = 0; i < KEYS; i++) keys.push((await cli('key', 'create', '--account', 'bench@example.com')).key as string);
    // The steady-rate phase spreads its jobs over 20 keys of two accounts (an account has at
    // most 10 keys), so the per-key limit of 5 unfinished jobs leaves room for 100 in flight.
    await cli('account', 'create', '--email', 'bench2@example.com');
    await cli('wallet', 'topup', '--account', 'bench2@example.com', '--coins', '100000000');
    const rateKeys = [...keys];
    for (let i = 0; i < 10; i++) rateKeys.push((await cli('key', 'create', '--account', 'bench2@example.com')).key as string);

    const state = JSON.parse(await fs.readFile(path.join(dataDir, 'postgres.json'), 'utf8')) as { password: string };
    const postmaster = (await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n');
    const pgPort = Number(postmaster[3]);
    // pg_ctl starts PostgreSQL as a daemon, outside the server's process tree.
    const roots = [server.child.pid!, Number(postmaster[0])];
    const db = new pg.Client({ host: '127.0.0.1', port: pgPort, user: 'postgres', password: state.password, database: 'mas' });
    await db.connect();

    let n = 0;
    let refused = 0;
    const submit = async (key: string, wait: boolean): Promise<string | undefined> => {
      n++;
      const res = await fetch(`http://127.0.0.1:${port}/api/v1/generations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(wait ? { prefer: 'wait=60' } : {}) },
        body: JSON.stringify({ model: 'mas/image-demo', prompt: `bench ${n}`, settings: { size: 128 } }),
      });
      const job = (await res.json()) as { id?: string };
      if (res.status === 429 && !wait) {
        refused++;
        return undefined;
      }
      if (!job.id) throw new Error(`submit failed: ${res.status} ${JSON.stringify(job)}`);
      return job.id;
    };
    const settle = async () => {
      for (;;) {
        const { rows } = await db.query(`select count(*)::int as n from generations where status in ('queued', 'running')`);
        if (rows[0].n === 0) return;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    const measure = async (ids: string[], began: number) => {
      const { rows } = await db.query(
        `select status, extract(epoch from completed_at - created_at) * 1000 as ms,
                extract(epoch from started_at - created_at) * 1000 as queued_ms,
                extract(epoch from completed_at - started_at) * 1000 as running_ms,
                extract(epoch from completed_at) * 1000 as done_at
         from generations where id = any($1)`,
        [ids],
      );
      const ok = rows.filter((r) => r.status === 'succeeded');
      const ms = ok.map((r) => Number(r.ms));
      const seconds = (Math.max(...ok.map((r) => Number(r.done_at))) - began) / 1000;
      return {
        jobs: rows.length,
        succeeded: ok.length,
        jobsPerSecond: ok.length / seconds,
        p50: percentile(ms, 50),
        p99: percentile(ms, 99),
        queuedP50: percentile(ok.map((r) => Number(r.queued_ms)), 50),
        runningP50: percentile(ok.map((r) => Number(r.running_ms)), 50),
      };
    };

    // Warm-up: the worker's first workflow tasks, JIT, connection pools.
    await Promise.all(keys.slice(0, 4).map((k) => submit(k, true)));
    await settle();

    // Phase 1: throughput with 50 jobs in flight.
    const xacts = async () => {
      const { rows } = await db.query(`select (xact_commit + xact_rollback)::bigint as n from pg_stat_database where datname = 'mas'`);
      return Number(rows[0].n);
    };
    // PostgreSQL's backends flush their statistics within about 10 s of going idle.
    await new Promise((r) => setTimeout(r, 11_000));
    const xactsBefore = await xacts();
    const cpuBefore = cpuByKind(roots);
    const laneIds: string[] = [];
    let next = 0;
    const began = Date.now();
    const lane = async (key: string) => {
      while (next < JOBS) {
        next++;
        laneIds.push((await submit(key, true))!);
      }
    };
    // allSettled: a lane that fails must not leave the others' rejections unhandled (which
    // would end this process before it stops the server it started).
    const lanes = await Promise.allSettled(keys.flatMap((key) => Array.from({ length: 5 }, () => lane(key))));
    const failed = lanes.find((l) => l.status === 'rejected');
    if (failed) throw failed.reason;
    await settle();
    const cpuAfter = cpuByKind(roots);
    const throughput = await measure(laneIds, began);
    await new Promise((r) => setTimeout(r, 11_000));
    // The bench's own reads of the database (settle's polls, these two) are in it too: a few per second.
    const work = {
      transactionsPerJob: (await xacts() - xactsBefore) / laneIds.length,
      cpuMsPerJob: Object.fromEntries([...new Set([...Object.keys(cpuBefore), ...Object.keys(cpuAfter)])].map((k) => [k, ((cpuAfter[k] ?? 0) - (cpuBefore[k] ?? 0)) / laneIds.length])),
    };

    // Phase 2: a steady arrival rate, submitted without waiting. The per-key limit of 5
    // unfinished jobs is spread over the keys in turn.
    const rateIds: string[] = [];
    const rateBegan = Date.now();
    const submits: Promise<void>[] = [];
    for (let i = 0; i < RATE_JOBS; i++) {
      const due = rateBegan + (i * 1000) / RATE;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      submits.push(submit(rateKeys[i % rateKeys.length]!, false).then((id) => void (id && rateIds.push(id))));
    }
    const submitted = await Promise.allSettled(submits);
    const refusedOtherwise = submitted.find((r) => r.status === 'rejected');
    if (refusedOtherwise) throw refusedOtherwise.reason;
    await settle();
    const latency = { ...(await measure(rateIds, rateBegan)), refused };

    // One job's workflow history, complete: the workflow closes when the job ends.
    const address = JSON.parse(await fs.readFile(path.join(dataDir, 'temporal', 'server.json'), 'utf8')) as { port: number };
    const connection = await Connection.connect({ address: `127.0.0.1:${address.port}` });
    const history = await new Client({ connection }).workflow.getHandle(rateIds[0]!).fetchHistory();
    await connection.close();
    const events = history.events ?? [];
    const types = new Map<string, number>();
    for (const e of events) {
      const name = String(proto.temporal.api.enums.v1.EventType[e.eventType ?? 0]).replace(/^EVENT_TYPE_/, '');
      types.set(name, (types.get(name) ?? 0) + 1);
    }
    await db.end();
    return {
      throughput,
      latency,
      historyEvents: events.length,
      historyTypes: [...types].map(([k, v]) => `${k} ×${v}`).join(', '),
      work,
      peakRssMiB: server.peakRssMiB(),
      workerPeakRssMiB: workerPeakMiB(server),
    };
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

/**
 * CPU time (user + system, ms) of the server's process tree by kind: the API process, the
 * worker, the Temporal dev server, PostgreSQL (every backend), and this benchmark process.
 */
function cpuByKind([root, postmaster]: number[]): Record<string, number> {
  const tick = 1000 / 100; // USER_HZ
  const out: Record<string, number> = {};
  for (const pid of [...processTree(root!), ...processTree(postmaster!)]) {
    try {
      const stat = fsSync.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ms = (Number(fields[11]) + Number(fields[12])) * tick;
      const cmd = fsSync.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      const kind = pid === root ? 'api' : /worker\.(js|ts)/.test(cmd) ? 'worker' : /temporal/.test(cmd) && /start-dev/.test(cmd) ? 'temporal' : /postgres/.test(cmd) ? 'postgres' : 'other';
      out[kind] = (out[kind] ?? 0) + ms;
    } catch {
      // gone
    }
  }
  const own = process.cpuUsage();
  out.bench = (own.user + own.system) / 1000;
  return out;
}

/** Peak RSS (VmHWM) of the server's worker child process, in MiB. */
function workerPeakMiB(server: Proc): number {
  for (const pid of processTree(server.child.pid!)) {
    try {
      if (!/worker\.(js|ts)/.test(fsSync.readFileSync(`/proc/${pid}/cmdline`, 'utf8'))) continue;
      return Number(/VmHWM:\s+(\d+)/.exec(fsSync.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
    } catch {
      // gone
    }
  }
  return NaN;
}

async function main() {
  const results: RunResult[] = [];
  const steal = stealMeter();
  for (let i = 0; i < RUNS; i++) {
    process.stderr.write(`run ${i + 1}/${RUNS}\n`);
    results.push(await run());
  }
  const f = (v: number, d = 0) => v.toFixed(d);
  const row = (label: string, r: Pick<RunResult, 'throughput' | 'latency' | 'peakRssMiB' | 'workerPeakRssMiB'>) =>
    `| ${label} | ${r.throughput.succeeded}/${r.throughput.jobs} | ${f(r.throughput.jobsPerSecond, 1)} | ${f(r.throughput.p50)} / ${f(r.throughput.p99)} | ` +
    `${r.latency.succeeded}/${RATE_JOBS}${r.latency.refused ? ` (${r.latency.refused} refused: per-key limit)` : ''} | ${f(r.latency.jobsPerSecond, 1)} | ${f(r.latency.p50)} / ${f(r.latency.p99)} | ` +
    `${f(r.latency.queuedP50)} / ${f(r.latency.runningP50)} | ${f(r.peakRssMiB)} / ${f(r.workerPeakRssMiB)} |`;
  const med = (pick: (r: RunResult) => number) => median(results.map(pick));
  const medians = {
    throughput: {
      jobs: med((r) => r.throughput.jobs),
      succeeded: med((r) => r.throughput.succeeded),
      jobsPerSecond: med((r) => r.throughput.jobsPerSecond),
      p50: med((r) => r.throughput.p50),
      p99: med((r) => r.throughput.p99),
    },
    latency: {
      jobs: med((r) => r.latency.jobs),
      succeeded: med((r) => r.latency.succeeded),
      jobsPerSecond: med((r) => r.latency.jobsPerSecond),
      p50: med((r) => r.latency.p50),
      p99: med((r) => r.latency.p99),
      queuedP50: med((r) => r.latency.queuedP50),
      runningP50: med((r) => r.latency.runningP50),
      refused: med((r) => r.latency.refused),
    },
    peakRssMiB: med((r) => r.peakRssMiB),
    workerPeakRssMiB: med((r) => r.workerPeakRssMiB),
  };
  process.stdout.write(
    [
      `Machine: ${machine()}`,
      `Date: ${new Date().toISOString()}; ${RUNS} runs; throughput phase ${JOBS} jobs, ${KEYS} keys × 5 lanes (50 in flight); ` +
        `latency phase ${RATE_JOBS} jobs at ${RATE}/s; local provider, no delay, embedded PostgreSQL and Temporal dev server, the worker as npm start runs it (a child process)`,
      '',
      '| run | 50 in flight: succeeded | jobs/s | submit→succeeded p50 / p99 ms | at the steady rate: succeeded | jobs/s | submit→succeeded p50 / p99 ms | queued / running p50 ms | peak RSS MiB: API / worker |',
      '|---|---|---|---|---|---|---|---|---|',
      ...results.map((r, i) => row(String(i + 1), r)),
      row('median', medians),
      '',
      `CPU time taken by the hypervisor for other guests (steal) during the runs: ${steal()} of this machine's CPU time`,
      '',
      `Workflow history of one job (it closes when the job succeeds): ${results[0]!.historyEvents} events: ${results[0]!.historyTypes}`,
      '',
      ...results.map(
        (r, i) =>
          `Run ${i + 1}, 50 in flight, per job: ${r.work.transactionsPerJob.toFixed(2)} PostgreSQL transactions; CPU ms ` +
          Object.entries(r.work.cpuMsPerJob).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(', ') +
          ` (total ${Object.values(r.work.cpuMsPerJob).reduce((a, b) => a + b, 0).toFixed(1)})`,
      ),
      `Load average at the end: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`,
      '',
    ].join('\n'),
  );
}

await main();
