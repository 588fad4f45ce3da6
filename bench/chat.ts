import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
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
 * Routes: `bench/failover` has two routes, the first a closed port (connection refused), the
 * second the mock. In the full run its breaker opens during the warm-up, so the row is the cost
 * of skipping an open route. FAILOVER=only runs just that comparison, short: the single-route
 * model, and the two-route one with the breaker held closed (BREAKER_FAILURES huge: every
 * request pays the refused connection, then the fallback) and open (the defaults), on two
 * service starts, c=1 latency and a c=8 autocannon run each.
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
  /** The request body, when not the default one. */
  payload?: string;
  /** Phases not run for this target, each with the reason the table prints in its cell. */
  skip?: Partial<Record<Phase, string>>;
}

/**
 * The timed phases of a target: c=1 latency, streamed first chunk, c=1 and c=32 throughput. Each
 * starts with one checked request (a correct answer, streamed or not); a phase with a failed
 * check or any failed request fails the run, after the table is printed with the failures in
 * their rows. A phase known not to work is skipped instead, with its reason in the table.
 */
type Phase = 'c1' | 'stream' | 'rps1' | 'c32';
const PHASE_NAME: Record<Phase, string> = { c1: 'c=1 latency', stream: 'streamed first chunk', rps1: 'c=1 throughput', c32: 'c=32 throughput' };

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function once(t: Target, payload = t.payload ?? body): Promise<{ ms: number; firstChunkMs: number; status: number; text: string }> {
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

/** Failed requests per target and phase: printed in the target's row, and they fail the run. */
const failures: Record<string, { count: number; sample: string }> = {};
function failed(t: Target, phase: Phase | 'failover', status: number, text: string, count = 1) {
  const f = (failures[`${t.name}\0${phase}`] ??= { count: 0, sample: '' });
  f.count += count;
  f.sample ||= status ? `${status} ${text.slice(0, 200)}` : text || 'connection errors';
}
const failedIn = (t: Target) => Object.entries(failures).filter(([k]) => k.startsWith(`${t.name}\0`)).reduce((n, [, f]) => n + f.count, 0);

/**
 * One request before a timed phase, whose answer must be right: 200, a chat completion with
 * text (non-streamed), or server-sent chunks with text ending in `data: [DONE]` (streamed).
 * Returns what was wrong, or undefined.
 */
function check(t: Target, stream: boolean): Promise<string | undefined> {
  const payload = stream ? JSON.stringify({ ...JSON.parse(t.payload ?? body), stream: true }) : (t.payload ?? body);
  return new Promise((resolve) => {
    const req = http.request(t.url, { method: 'POST', agent, headers: { 'content-type': 'application/json', ...t.headers } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => {
        if (res.statusCode !== 200) return resolve(`${res.statusCode} ${text.slice(0, 200)}`);
        try {
          if (!stream) {
            const content = (JSON.parse(text) as { choices?: { message?: { content?: unknown } }[] }).choices?.[0]?.message?.content;
            return resolve(typeof content === 'string' && content.length > 0 ? undefined : `no answer text in ${text.slice(0, 200)}`);
          }
          const events = text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6).trim());
          const deltas = events.filter((e) => e !== '[DONE]').map((e) => (JSON.parse(e) as { choices?: { delta?: { content?: unknown } }[] }).choices?.[0]?.delta?.content);
          if (events.at(-1) !== '[DONE]') return resolve(`the stream did not end with data: [DONE]: ${text.slice(-200)}`);
          return resolve(deltas.some((d) => typeof d === 'string' && d.length > 0) ? undefined : `no text in the streamed chunks: ${text.slice(0, 200)}`);
        } catch (err) {
          return resolve(`unreadable answer (${(err as Error).message}): ${text.slice(0, 200)}`);
        }
      });
    });
    req.on('error', (err) => resolve(`connection error: ${err.message}`));
    req.end(payload);
  });
}

async function sequential(t: Target, payload = t.payload ?? body, phase: Phase | 'failover' = 'c1') {
  const ms: number[] = [];
  const first: number[] = [];
  for (let i = 0; i < 200; i++) await once(t, payload); // warm-up
  for (let i = 0; i < SAMPLES; i++) {
    const r = await once(t, payload);
    if (r.status !== 200) {
      failed(t, phase, r.status, r.text);
      continue;
    }
    ms.push(r.ms);
    first.push(r.firstChunkMs);
  }
  return { p50: percentile(ms, 50), p99: percentile(ms, 99), firstP50: percentile(first, 50), firstP99: percentile(first, 99) };
}

async function load(t: Target, connections: number, phase: Phase = connections === 1 ? 'rps1' : 'c32') {
  const result = await autocannon({ url: t.url, method: 'POST', headers: { 'content-type': 'application/json', ...t.headers }, body: t.payload ?? body, connections, duration: DURATION });
  if (result.non2xx > 0 || result.errors > 0) failed(t, phase, 0, `${result.non2xx} answers not 2xx, ${result.errors} errors`, result.non2xx + result.errors);
  // Throughput counts only successful answers.
  return { rps: result['2xx'] / DURATION, p50: result.latency.p50, p99: result.latency.p99 };
}

/** A provider whose port refuses connections, and a model whose first route is it. */
async function failoverCatalog() {
  const closed = await freePort();
  return {
    providers: `  down: { kind: openai-compatible, base_url: "http://127.0.0.1:${closed}/v1", timeout_seconds: 30 }\n`,
    models:
      `  - { id: bench/failover, name: Failover, type: text, generation_types: [chat], routes: [{ provider: down, model: mock }, { provider: mock, model: mock }],\n` +
      `      pricing: { input_per_million: 100, output_per_million: 400 }, context_window: 8192, max_output_tokens: 256, default_max_tokens: 16 }\n`,
  };
}
const failoverBody = JSON.stringify({ ...JSON.parse(body), model: 'bench/failover' });

/** FAILOVER=only: the latency a refused first route adds, with its breaker closed and open. */
async function failoverOnly() {
  const rows: string[] = [];
  const load = async (t: Target, payload: string) => {
    const r = await autocannon({ url: t.url, method: 'POST', headers: { 'content-type': 'application/json', ...t.headers }, body: payload, connections: 8, duration: DURATION });
    return { rps: r['2xx'] / DURATION, p50: r.latency.p50, p99: r.latency.p99, bad: r.non2xx + r.errors };
  };
  const steal = stealMeter();
  const load1 = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  for (const [label, env] of [
    ['breaker held closed (BREAKER_FAILURES=1e9)', { BREAKER_FAILURES: '1000000000' }],
    ['breaker open (defaults: 5 failures in 60 s, 30 s cool-down)', {}],
  ] as const) {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-'));
    const procs: Proc[] = [];
    try {
      const { mockUrl, port, key } = await startChatService(dataDir, procs, [], { ...(await failoverCatalog()), env });
      const ours: Target = { name: 'this gateway', url: `http://127.0.0.1:${port}/api/v1/chat/completions`, headers: { authorization: `Bearer ${key}` } };
      const direct: Target = { name: 'mock, direct', url: `${mockUrl}/chat/completions`, headers: {} };
      const measure = async (name: string, t: Target, payload: string) => {
        process.stderr.write(`${label}: ${name}\n`);
        const wrong = await check({ ...t, name, payload }, false);
        if (wrong) failed({ ...t, name }, 'failover', 0, `the check before the phase: ${wrong}`);
        const c1 = await sequential({ ...t, name }, payload, 'failover');
        const c8 = await load(t, payload);
        if (c8.bad > 0) failed({ ...t, name }, 'failover', 0, `${c8.bad} failed at c=8`, c8.bad);
        rows.push(`| ${label} | ${name} | ${c1.p50.toFixed(2)} | ${c1.p99.toFixed(2)} | ${c8.rps.toFixed(0)} | ${c8.p50} | ${c8.p99} | ${c8.bad} |`);
        return c1;
      };
      if (rows.length === 0) await measure('mock, direct', direct, body);
      const one = await measure('bench/mock (one route)', ours, body);
      const two = await measure('bench/failover (first route refused)', ours, failoverBody);
      rows.push(`| ${label} | failover adds (c=1) | ${(two.p50 - one.p50).toFixed(2)} | ${(two.p99 - one.p99).toFixed(2)} | | | | |`);
    } finally {
      for (const p of procs.reverse()) await p.stop();
      await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
    }
  }
  const lines = [
    `Machine: ${machine()}; nproc ${os.availableParallelism()}; load average before (1, 5, 15 min): ${load1}; after: ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`,
    `Date: ${new Date().toISOString()}; c=1 from ${SAMPLES} sequential keep-alive requests (after 200 warm-up), c=8 from autocannon for ${DURATION} s`,
    '',
    '| breaker | target | c=1 p50 ms | c=1 p99 ms | c=8 req/s | c=8 p50 ms | c=8 p99 ms | failed |',
    '|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
    ...failureLines(),
    `CPU time taken by the hypervisor for other guests (steal) during the runs: ${steal()} of this machine's CPU time`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  failIfAnyFailed();
}

/** The failed requests, one line per target and phase. */
function failureLines(): string[] {
  return Object.entries(failures).map(([key, f]) => {
    const [name, phase] = key.split('\0') as [string, Phase | 'failover'];
    return `Failed requests, ${name}, ${phase === 'failover' ? 'failover' : PHASE_NAME[phase]}: ${f.count} (first: ${f.sample})`;
  });
}

/** A phase with a failed request makes the whole run fail, after its table is printed. */
function failIfAnyFailed() {
  const total = Object.values(failures).reduce((n, f) => n + f.count, 0);
  if (total === 0) return;
  process.stdout.write(`THE RUN FAILED: ${total} requests failed (above); its figures are not a result.\n`);
  process.exitCode = 1;
}

async function main() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-'));
  const procs: Proc[] = [];
  try {
    const { mockUrl, port, ours, key } = await startChatService(dataDir, procs, [], await failoverCatalog());

    const portkeyPort = await freePort();
    // With fresh headers on streamed upstream answers (bench/portkey-fresh-headers.js says why), or its streamed phase fails every request.
    const portkey = start(process.execPath, [`--import=${pathToFileURL(path.join(import.meta.dirname, 'portkey-fresh-headers.js')).href}`, 'node_modules/@portkey-ai/gateway/build/start-server.js', `--port=${portkeyPort}`, '--headless']);
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
      // Same process: its row's latencies are the one-route row's plus skipping an open route.
      { name: 'this gateway, 2 routes, first refused (breaker open)', url: `http://127.0.0.1:${port}/api/v1/chat/completions`, headers: { authorization: `Bearer ${key}` }, proc: ours, payload: failoverBody },
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
    const streamBody = (t: Target) => JSON.stringify({ ...JSON.parse(t.payload ?? body), stream: true });
    const steal = stealMeter();
    const loadBefore = os.loadavg().map((x) => x.toFixed(2)).join(' ');
    for (let run = 1; run <= RUNS; run++) {
      for (const t of targets) {
        process.stderr.write(`run ${run}/${RUNS}: ${t.name}\n`);
        for (const phase of ['c1', 'stream', 'rps1', 'c32'] as const) {
          if (t.skip?.[phase]) continue;
          const wrong = await check(t, phase === 'stream');
          if (wrong) {
            failed(t, phase, 0, `the check before the phase: ${wrong}`);
            continue;
          }
          if (phase === 'c1') rows[t.name]!.c1.push(await sequential(t));
          else if (phase === 'stream') rows[t.name]!.stream.push(await sequential(t, streamBody(t), 'stream'));
          else if (phase === 'rps1') rows[t.name]!.rps1.push((await load(t, 1)).rps);
          else rows[t.name]!.c32.push(await load(t, 32));
        }
      }
    }
    const loadAfter = os.loadavg().map((x) => x.toFixed(2)).join(' ');

    const med = (xs: number[]) => median(xs);
    const direct = rows['mock, direct']!;
    const fmt = (n: number, d = 2) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');
    const c32 = (name: string) => (rows[name] ? med(rows[name].c32.map((x) => x.rps)) : NaN);
    // A ratio only between two c=32 phases that ran with no failed request.
    const c32Failed = (name: string) => failures[`${name}\0c32`] !== undefined || targets.find((t) => t.name === name)?.skip?.c32 !== undefined;
    const ratio = (name: string) =>
      !rows[name] ? 'n/a (not run: see below)' : c32Failed(name) || c32Failed('this gateway') ? 'n/a (a c=32 phase failed or was skipped: see its row)' : `${fmt(c32('this gateway') / c32(name), 2)}×`;
    // A cell of a phase that was skipped, or had failed requests, says so.
    const cell = (t: Target, phase: Phase, value: string) => {
      if (t.skip?.[phase]) return `skipped: ${t.skip[phase]}`;
      const f = failures[`${t.name}\0${phase}`];
      return f ? `${value} (FAILED: ${f.count} requests)` : value;
    };
    const lines = [
      `Machine: ${machine()}; steal during the runs ${steal()}; load average (1, 5, 15 min) before the runs ${loadBefore}, after ${loadAfter}`,
      `Date: ${new Date().toISOString()}; ${RUNS} runs, medians; c=1 latency from ${SAMPLES} sequential keep-alive requests per run, throughput from autocannon (${DURATION} s per run); each phase began with one checked request.`,
      '',
      '| target | c=1 p50 ms | c=1 p99 ms | added p50 ms | added p99 ms | c=1 req/s | c=32 req/s | c=32 p50 ms | c=32 p99 ms | stream first chunk p50 / p99 ms | peak RSS MiB | failed requests |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|',
      ...targets.map((t) => {
        const r = rows[t.name]!;
        const p50 = med(r.c1.map((x) => x.p50));
        const p99 = med(r.c1.map((x) => x.p99));
        const added50 = p50 - med(direct.c1.map((x) => x.p50));
        const added99 = p99 - med(direct.c1.map((x) => x.p99));
        return `| ${t.name} | ${cell(t, 'c1', fmt(p50))} | ${cell(t, 'c1', fmt(p99))} | ${t.proc ? fmt(added50) : '–'} | ${t.proc ? fmt(added99) : '–'} | ${cell(t, 'rps1', fmt(med(r.rps1), 0))} | ${cell(t, 'c32', fmt(med(r.c32.map((x) => x.rps)), 0))} | ${fmt(med(r.c32.map((x) => x.p50)))} | ${fmt(med(r.c32.map((x) => x.p99)))} | ${cell(t, 'stream', `${fmt(med(r.stream.map((x) => x.firstP50)))} / ${fmt(med(r.stream.map((x) => x.firstP99)))}`)} | ${t.proc ? fmt(t.tree ? t.proc.peakTreeRssMiB() : t.proc.peakRssMiB(), 0) : '–'} | ${failedIn(t)} |`;
      }),
      '',
      `Database round trips (PostgreSQL transactions) per request through this gateway: ${fmt(roundTrips, 2)} one at a time, ${fmt(loadedTrips, 2)} at c=32 (statements of concurrent requests are batched)`,
      ...failureLines(),
      `This gateway / Portkey requests per second at c=32: ${ratio('Portkey gateway')}`,
      `This gateway / LiteLLM (stateless) requests per second at c=32: ${ratio(liteStateless)}`,
      `This gateway / LiteLLM (PostgreSQL + virtual key) requests per second at c=32: ${ratio(liteDb)}`,
      `LiteLLM Proxy ${LITELLM_VERSION}: \`litellm --config … --num_workers ${LITELLM_WORKERS}\` (one worker, as our gateway is one process; LiteLLM recommends one worker per CPU core), LITELLM_MODE=PRODUCTION, LITELLM_LOG=ERROR, no callbacks, telemetry off, local model cost map; its peak RSS is its whole process tree (the sum of each process's peak).`,
      ...skipped,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
    failIfAnyFailed();
  } catch (err) {
    for (const p of procs) process.stderr.write(`--- ${p.child.spawnargs.slice(-2).join(' ')}\n${p.output().slice(-1500)}\n`);
    throw err;
  } finally {
    for (const p of procs.reverse()) await p.stop();
    await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

if (process.env.FAILOVER === 'only') await failoverOnly();
else await main();
