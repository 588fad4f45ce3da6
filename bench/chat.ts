import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import pg from 'pg';
import { ensureLiteLLM, generateVirtualKey, LITELLM_VERSION, LITELLM_WORKERS, MASTER_KEY, prepareDatabaseMode, startLiteLLM } from './litellm.ts';
import { freePort, machine, median, percentile, start, startChatService, stealMeter, type Proc } from './support.ts';

/**
 * npm run bench:chat — our gateway against a mock upstream that answers at once, beside the
 * mock called directly and, in front of the same mock, the Portkey gateway and LiteLLM Proxy
 * (bench/litellm.ts: a pinned release in a venv under ~/.cache/mas, one worker) twice: stateless
 * (master key, no database) and with its PostgreSQL and a virtual key, which is where its spend
 * tracking lives (skipped, with the reason printed, where its Prisma engines cannot be had).
 * Real billing on every request through ours (reserve, settle, ledger). Several runs; the
 * table shows medians.
 *   RUNS (2), DURATION seconds per autocannon run (10), SAMPLES sequential requests for
 *   latency (2000)
 */
const RUNS = Number(process.env.RUNS ?? 2);
const DURATION = Number(process.env.DURATION ?? 10);
const SAMPLES = Number(process.env.SAMPLES ?? 2000);
const body = JSON.stringify({ model: 'bench/mock', messages: [{ role: 'user', content: 'Hello, ledger.' }], max_tokens: 16 });

interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
  proc?: Proc;
  /** Peak RSS of the whole process tree (a Python server and what it runs), not only the child. */
  tree?: boolean;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function once(t: Target, payload = body): Promise<{ ms: number; firstChunkMs: number; status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const began = process.hrtime.bigint();
    let first = 0;
    const req = http.request(t.url, { method: 'POST', agent, headers: { 'content-type': 'application/json', ...t.headers } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => {
        if (!first) first = Number(process.hrtime.bigint() - began) / 1e6;
        if (res.statusCode !== 200) text += c.toString();
      });
      res.on('end', () => resolve({ ms: Number(process.hrtime.bigint() - began) / 1e6, firstChunkMs: first, status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** Errors are counted, not fatal: a gateway that fails some requests is reported as such. */
const failures: Record<string, { count: number; sample: string }> = {};
function failed(t: Target, status: number, text: string) {
  const f = (failures[t.name] ??= { count: 0, sample: '' });
  f.count++;
  f.sample ||= `${status} ${text.slice(0, 200)}`;
}

async function sequential(t: Target, payload = body) {
  const ms: number[] = [];
  const first: number[] = [];
  for (let i = 0; i < 200; i++) await once(t, payload); // warm-up
  for (let i = 0; i < SAMPLES; i++) {
    const r = await once(t, payload);
    if (r.status !== 200) {
      failed(t, r.status, r.text);
      continue;
    }
    ms.push(r.ms);
    first.push(r.firstChunkMs);
  }
  return { p50: percentile(ms, 50), p99: percentile(ms, 99), firstP50: percentile(first, 50), firstP99: percentile(first, 99) };
}

async function load(t: Target, connections: number) {
  const result = await autocannon({ url: t.url, method: 'POST', headers: { 'content-type': 'application/json', ...t.headers }, body, connections, duration: DURATION });
  if (result.non2xx > 0 || result.errors > 0) {
    const f = (failures[t.name] ??= { count: 0, sample: '' });
    f.count += result.non2xx + result.errors;
  }
  // Throughput counts only successful answers.
  return { rps: result['2xx'] / DURATION, p50: result.latency.p50, p99: result.latency.p99 };
}

async function main() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-'));
  const procs: Proc[] = [];
  try {
    const { mockUrl, port, ours, key } = await startChatService(dataDir, procs);

    const portkeyPort = await freePort();
    const portkey = start(process.execPath, ['node_modules/@portkey-ai/gateway/build/start-server.js', `--port=${portkeyPort}`, '--headless']);
    procs.push(portkey);
    await portkey.waitFor(/Ready for connections/);

    const ready = async (t: Target) => {
      for (let i = 0; i < 100; i++) {
        if ((await once(t)).status === 200) return;
        await new Promise((r) => setTimeout(r, 200));
      }
      throw new Error(`${t.name} never answered 200`);
    };
    const targets: Target[] = [
      { name: 'mock, direct', url: `${mockUrl}/chat/completions`, headers: {} },
      { name: 'this gateway', url: `http://127.0.0.1:${port}/api/v1/chat/completions`, headers: { authorization: `Bearer ${key}` }, proc: ours },
      {
        name: 'Portkey gateway',
        url: `http://127.0.0.1:${portkeyPort}/v1/chat/completions`,
        headers: { authorization: 'Bearer unused', 'x-portkey-provider': 'openai', 'x-portkey-custom-host': mockUrl },
        proc: portkey,
      },
    ];

    // LiteLLM Proxy, stateless and then with its database. Its absence is reported, not fatal.
    const say = (line: string) => process.stderr.write(`${line}\n`);
    const skipped: string[] = [];
    const liteStateless = 'LiteLLM, stateless';
    const liteDb = 'LiteLLM, PostgreSQL + virtual key';
    let venv: string | undefined;
    try {
      venv = await ensureLiteLLM(say);
    } catch (err) {
      skipped.push(`LiteLLM: not installed (${(err as Error).message})`);
    }
    if (venv) {
      const stateless = await startLiteLLM({ venv, dir: path.join(dataDir, 'litellm-stateless'), mockUrl });
      procs.push(stateless.proc);
      targets.push({ name: liteStateless, url: `${stateless.url}/v1/chat/completions`, headers: { authorization: `Bearer ${MASTER_KEY}` }, proc: stateless.proc, tree: true });
      const dbMode = await prepareDatabaseMode(venv, say);
      if (!dbMode.ok) skipped.push(`${liteDb}: skipped: ${dbMode.reason}`);
      else {
        // A database of its own on the bench's PostgreSQL server (ours is 'mas').
        const state = JSON.parse(await fs.readFile(path.join(dataDir, 'postgres.json'), 'utf8')) as { password: string };
        const pgPort = Number((await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]);
        const admin = new pg.Client({ host: '127.0.0.1', port: pgPort, user: 'postgres', password: state.password, database: 'postgres' });
        await admin.connect();
        await admin.query('create database litellm');
        await admin.end();
        const withDb = await startLiteLLM({
          venv,
          dir: path.join(dataDir, 'litellm-db'),
          mockUrl,
          databaseUrl: `postgresql://postgres:${encodeURIComponent(state.password)}@127.0.0.1:${pgPort}/litellm`,
        });
        procs.push(withDb.proc);
        const virtualKey = await generateVirtualKey(withDb);
        targets.push({ name: liteDb, url: `${withDb.url}/v1/chat/completions`, headers: { authorization: `Bearer ${virtualKey}` }, proc: withDb.proc, tree: true });
      }
    }

    for (const t of targets) await ready(t);

    // Database round trips per request: transactions counted by PostgreSQL itself (each
    // statement outside an explicit transaction is one), over a fixed number of requests one at
    // a time, then under load. Backends publish their counts when idle (up to 10 s later), so
    // each reading waits for that.
    const state = JSON.parse(await fs.readFile(path.join(dataDir, 'postgres.json'), 'utf8')) as { password: string };
    const pgPort = Number((await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]);
    const db = new pg.Client({ host: '127.0.0.1', port: pgPort, user: 'postgres', password: state.password, database: 'mas' });
    await db.connect();
    const xacts = async () => {
      await new Promise((r) => setTimeout(r, 11_000));
      return Number((await db.query(`select xact_commit + xact_rollback as n from pg_stat_database where datname = 'mas'`)).rows[0].n);
    };
    for (let i = 0; i < 100; i++) await once(targets[1]!);
    const before = await xacts();
    for (let i = 0; i < 500; i++) await once(targets[1]!);
    const between = await xacts();
    const loaded = await load(targets[1]!, 32);
    const after = await xacts();
    await db.end();
    // The reading itself is one transaction each time.
    const roundTrips = (between - before - 1) / 500;
    const loadedTrips = (after - between - 1) / (loaded.rps * DURATION);

    const rows: Record<string, { c1: Awaited<ReturnType<typeof sequential>>[]; rps1: number[]; c32: Awaited<ReturnType<typeof load>>[]; stream: Awaited<ReturnType<typeof sequential>>[] }> = {};
    for (const t of targets) rows[t.name] = { c1: [], rps1: [], c32: [], stream: [] };
    const streamBody = JSON.stringify({ ...JSON.parse(body), stream: true });
    const steal = stealMeter();
    for (let run = 1; run <= RUNS; run++) {
      for (const t of targets) {
        process.stderr.write(`run ${run}/${RUNS}: ${t.name}\n`);
        rows[t.name]!.c1.push(await sequential(t));
        rows[t.name]!.stream.push(await sequential(t, streamBody));
        rows[t.name]!.rps1.push((await load(t, 1)).rps);
        rows[t.name]!.c32.push(await load(t, 32));
      }
    }

    const med = (xs: number[]) => median(xs);
    const direct = rows['mock, direct']!;
    const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');
    const c32 = (name: string) => (rows[name] ? med(rows[name].c32.map((x) => x.rps)) : NaN);
    const ratio = (name: string) => (rows[name] ? `${fmt(c32('this gateway') / c32(name), 2)}×` : 'n/a (not run: see below)');
    const lines = [
      `Machine: ${machine()}`,
      `Date: ${new Date().toISOString()}; ${RUNS} runs, medians; c=1 latency from ${SAMPLES} sequential keep-alive requests per run, throughput from autocannon (${DURATION} s per run).`,
      '',
      '| target | c=1 p50 ms | c=1 p99 ms | added p50 ms | added p99 ms | c=1 req/s | c=32 req/s | c=32 p50 ms | c=32 p99 ms | stream first chunk p50 / p99 ms | peak RSS MiB |',
      '|---|---|---|---|---|---|---|---|---|---|---|',
      ...targets.map((t) => {
        const r = rows[t.name]!;
        const p50 = med(r.c1.map((x) => x.p50));
        const p99 = med(r.c1.map((x) => x.p99));
        const added50 = p50 - med(direct.c1.map((x) => x.p50));
        const added99 = p99 - med(direct.c1.map((x) => x.p99));
        return `| ${t.name} | ${fmt(p50)} | ${fmt(p99)} | ${t.proc ? fmt(added50) : '–'} | ${t.proc ? fmt(added99) : '–'} | ${fmt(med(r.rps1), 0)} | ${fmt(med(r.c32.map((x) => x.rps)), 0)} | ${fmt(med(r.c32.map((x) => x.p50)))} | ${fmt(med(r.c32.map((x) => x.p99)))} | ${fmt(med(r.stream.map((x) => x.firstP50)))} / ${fmt(med(r.stream.map((x) => x.firstP99)))} | ${t.proc ? fmt(t.tree ? t.proc.peakTreeRssMiB() : t.proc.peakRssMiB(), 0) : '–'} |`;
      }),
      '',
      `Database round trips (PostgreSQL transactions) per request through this gateway: ${fmt(roundTrips, 2)} one at a time, ${fmt(loadedTrips, 2)} at c=32 (statements of concurrent requests are batched)`,
      ...Object.entries(failures).map(([name, f]) => `Failed requests, ${name}: ${f.count} (first: ${f.sample || 'connection errors'})`),
      `CPU time taken by the hypervisor for other guests (steal) during the runs: ${steal()} of this machine's CPU time`,
      `This gateway / Portkey requests per second at c=32: ${ratio('Portkey gateway')}`,
      `This gateway / LiteLLM (stateless) requests per second at c=32: ${ratio(liteStateless)}`,
      `This gateway / LiteLLM (PostgreSQL + virtual key) requests per second at c=32: ${ratio(liteDb)}`,
      `LiteLLM Proxy ${LITELLM_VERSION}: \`litellm --config … --num_workers ${LITELLM_WORKERS}\` (one worker, as our gateway is one process; LiteLLM recommends one worker per CPU core), LITELLM_MODE=PRODUCTION, LITELLM_LOG=ERROR, no callbacks, telemetry off, local model cost map; its peak RSS is its whole process tree (the sum of each process's peak).`,
      ...skipped,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } catch (err) {
    for (const p of procs) process.stderr.write(`--- ${p.child.spawnargs.slice(-2).join(' ')}\n${p.output().slice(-1500)}\n`);
    throw err;
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

await main();
