import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import pg from 'pg';
import { Agent, FormData, fetch as undiciFetch, request } from 'undici';
import YAML from 'yaml';
import { freePort, machine, percentile, ROOT, serviceArgs, start, stealMeter, type Proc } from './support.ts';
import { entryArgs } from '../scripts/support/process.ts';

/**
 * npm run bench:soak -- --duration 10m — the service as production runs it (`serviceArgs('main')`:
 * API, Temporal worker, embedded PostgreSQL and Temporal dev server) under a steady mixed load
 * for a while, to see whether anything grows.
 *
 * Load, each at a fixed arrival rate (open loop, in-flight bounded per kind; an arrival that
 * finds its kind at the bound is counted as dropped, not queued):
 *   chat     CHAT_RATE (40)/s chat completions against a mock upstream, every STREAM_EVERY (4)th streamed
 *   jobs     JOB_RATE (2)/s media jobs (mas/image-demo): submit, poll until succeeded, fetch the result
 *   uploads  UPLOAD_RATE (1)/s small PNG uploads (multipart POST /api/v1/files)
 *   mcp      MCP_RATE (2)/s MCP tool calls (get_balance, list_models) through the official SDK
 *            client on one long-lived connection; every 10th opens a fresh client, lists the
 *            tools and closes it (`mcp_session`)
 * Every SAMPLE_SECONDS (10): RSS of every service process (found from the started process's
 * tree, plus the PostgreSQL postmaster's), the API process's heap and event-loop delay p99 (its
 * /metrics), and each request kind's client-side p99, count and errors in the window.
 *
 * Writes bench/soak.csv and bench/soak.svg (OUT_DIR to write elsewhere) and prints a markdown
 * summary. After the load stops and the jobs have ended, no hold may be left open and every
 * wallet must equal the sum of its ledger entries. Exit 1 when errors exceed MAX_ERROR_RATE
 * (0.001 of requests), a hold is left open or a wallet disagrees with its ledger.
 */

// ---------------------------------------------------------------- options

export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new Error(`--duration: "${text}" is not a duration like 90s, 10m or 1h`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm' | 'h'];
}

function flag(name: string): string | undefined {
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === `--${name}`) return argv[i + 1];
    if (argv[i]!.startsWith(`--${name}=`)) return argv[i]!.slice(name.length + 3);
  }
  return undefined;
}

const DURATION_MS = parseDuration(flag('duration') ?? process.env.DURATION ?? '10m');
const SAMPLE_MS = Number(process.env.SAMPLE_SECONDS ?? 10) * 1000;
const CHAT_RATE = Number(process.env.CHAT_RATE ?? 40);
const STREAM_EVERY = Number(process.env.STREAM_EVERY ?? 4);
const JOB_RATE = Number(process.env.JOB_RATE ?? 2);
const UPLOAD_RATE = Number(process.env.UPLOAD_RATE ?? 1);
const MCP_RATE = Number(process.env.MCP_RATE ?? 2);
const MAX_ERROR_RATE = Number(process.env.MAX_ERROR_RATE ?? 0.001);
const OUT_DIR = path.resolve(process.env.OUT_DIR ?? path.join(ROOT, 'bench'));
const JOB_KEYS = 4; // the per-key limit is 5 unfinished jobs: 4 keys leave room for 20
const METRICS_TOKEN = 'soak-metrics-token';
/** The service's whole output (stdout and stderr, the worker's included) is kept here after the run. */
const logFile = path.join(os.tmpdir(), `mas-soak-service-${process.pid}.log`);

// ---------------------------------------------------------------- request bookkeeping

const KINDS = ['chat', 'chat_stream', 'job_submit', 'job_poll', 'job', 'job_result', 'upload', 'mcp', 'mcp_session'] as const;
type Kind = (typeof KINDS)[number];
/** Kinds that are one HTTP request each ('job' is the whole job, submit to succeeded, 'mcp_session' several requests). */
const REQUEST_KINDS: Kind[] = ['chat', 'chat_stream', 'job_submit', 'job_poll', 'job_result', 'upload', 'mcp'];

interface KindStats {
  /** Latencies (ms) of successful requests in the current window. */
  window: number[];
  windowErrors: number;
  /** [ms since the load began, latency ms] of every success. */
  all: [number, number][];
  ok: number;
  errors: number;
  dropped: number;
  samples: string[];
}
const stats = Object.fromEntries(KINDS.map((k) => [k, { window: [], windowErrors: 0, all: [], ok: 0, errors: 0, dropped: 0, samples: [] } as KindStats])) as Record<Kind, KindStats>;
let loadBegan = 0;

function record(kind: Kind, began: number, error?: string): void {
  const s = stats[kind];
  const ms = performance.now() - began;
  if (error === undefined) {
    s.ok++;
    s.window.push(ms);
    s.all.push([performance.now() - loadBegan, ms]);
  } else {
    s.errors++;
    s.windowErrors++;
    if (s.samples.length < 5) s.samples.push(error.slice(0, 300));
  }
}

async function timed<T>(kind: Kind, fn: () => Promise<T>): Promise<T> {
  const began = performance.now();
  try {
    const out = await fn();
    record(kind, began);
    return out;
  } catch (err) {
    record(kind, began, (err as Error).message);
    counted.add(err as object);
    throw err;
  }
}

/** Set when the service exits during the run: the load stops at once. */
let stopLoad = false;
let cleaningUp = false;

/** Errors already recorded under a request's kind, so that a job that failed because of one is not counted twice. */
const counted = new WeakSet<object>();
let jobOwnErrors = 0;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Calls `op` RATE times a second from `began` until `until` (performance.now() times), without
 * waiting for it; at most `cap` in flight, an arrival beyond that is dropped and counted.
 */
async function drive(kind: Kind, rate: number, cap: number, until: number, op: (i: number) => Promise<unknown>): Promise<void> {
  if (rate <= 0) return;
  const inflight = new Set<Promise<unknown>>();
  const began = performance.now();
  for (let i = 0; ; i++) {
    const due = began + (i * 1000) / rate;
    if (due >= until || stopLoad) break;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    if (inflight.size >= cap) {
      stats[kind].dropped++;
      continue;
    }
    const p: Promise<unknown> = op(i)
      .catch(() => undefined) // recorded by timed()
      .finally(() => inflight.delete(p));
    inflight.add(p);
  }
  await Promise.allSettled([...inflight]);
}

// ---------------------------------------------------------------- processes

interface ProcInfo {
  pid: number;
  label: string;
  cmd: string;
  rssKb: number;
  pssKb: number;
  cpuTicks: number;
}

const LABELS = ['api', 'main', 'worker', 'temporal', 'postgres', 'other'] as const;
type Label = (typeof LABELS)[number];

function read(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  let tasks: string[] = [];
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const t of tasks) {
    for (const c of (read(`/proc/${pid}/task/${t}/children`) ?? '').split(/\s+/)) if (c) out.push(Number(c));
  }
  return out;
}

function tree(root: number): number[] {
  const seen = new Set<number>();
  const queue = [root];
  while (queue.length) {
    const pid = queue.shift()!;
    if (seen.has(pid) || !fs.existsSync(`/proc/${pid}`)) continue;
    seen.add(pid);
    queue.push(...childrenOf(pid));
  }
  return [...seen];
}

function labelOf(pid: number, root: number, cmd: string, anApi: boolean): Label {
  const argv0 = path.basename(cmd.split(' ')[0] ?? '');
  if (/^node/.test(argv0) || cmd.startsWith(process.execPath)) {
    if (/worker/i.test(cmd)) return 'worker';
    if (/\bapi\.(js|ts)\b/.test(cmd)) return 'api';
    // The started process serves the API unless it has an API child of its own.
    if (pid === root) return anApi ? 'main' : 'api';
    return 'other';
  }
  if (/^postgres|^postmaster/.test(argv0) || /^postgres:/.test(cmd)) return 'postgres';
  if (/^temporal/.test(argv0)) return 'temporal';
  return 'other';
}

/** Every process of the service: the started process's tree, the postmaster's (pg_ctl daemonizes it) and the Temporal dev server's. */
function serviceProcesses(root: number, dataDir: string): ProcInfo[] {
  const pids = new Set(tree(root));
  const postmaster = Number(read(path.join(dataDir, 'postgres', 'postmaster.pid'))?.split('\n')[0]);
  if (postmaster) for (const p of tree(postmaster)) pids.add(p);
  try {
    const temporal = (JSON.parse(read(path.join(dataDir, 'temporal', 'server.json')) ?? '{}') as { pid?: number }).pid;
    if (temporal) for (const p of tree(temporal)) pids.add(p);
  } catch {
    // not written yet
  }
  const infos: Omit<ProcInfo, 'label'>[] = [];
  for (const pid of pids) {
    const status = read(`/proc/${pid}/status`);
    const cmd = (read(`/proc/${pid}/cmdline`) ?? '').split('\0').filter(Boolean).join(' ');
    if (!status || !cmd) continue;
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    const pssKb = Number(/^Pss:\s+(\d+)/m.exec(read(`/proc/${pid}/smaps_rollup`) ?? '')?.[1] ?? rssKb);
    // /proc/<pid>/stat: fields after the command's closing parenthesis; utime and stime are the 14th and 15th fields.
    const stat = (read(`/proc/${pid}/stat`) ?? '').split(') ')[1]?.split(' ') ?? [];
    const cpuTicks = Number(stat[11] ?? 0) + Number(stat[12] ?? 0);
    infos.push({ pid, cmd, rssKb, pssKb, cpuTicks });
  }
  const anApi = infos.some((p) => p.pid !== root && /^node/.test(path.basename(p.cmd.split(' ')[0] ?? '')) && /\bapi\.(js|ts)\b/.test(p.cmd));
  return infos.map((p) => ({ ...p, label: labelOf(p.pid, root, p.cmd, anApi) }));
}

// ---------------------------------------------------------------- sampling

interface Sample {
  t: number; // seconds since the load began
  rss: Partial<Record<Label, number>>; // MB (sum over the label's processes)
  pss: Partial<Record<Label, number>>;
  cpu: Partial<Record<Label, number>>; // % of one core over the window
  procs: Partial<Record<Label, number>>;
  heapMb: number;
  heapTotalMb: number;
  externalMb: number;
  elP99Ms: number;
  kinds: Record<Kind, { n: number; errors: number; dropped: number; p99: number }>;
}

const MB = 1024 * 1024;
const TICKS = 100; // USER_HZ on Linux

function parseMetric(text: string, name: string): number {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

// ---------------------------------------------------------------- statistics

/** Least-squares slope of y over x. */
export function slope(points: [number, number][]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((a, p) => a + p[0], 0) / n;
  const my = points.reduce((a, p) => a + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : '–');

// ---------------------------------------------------------------- chart

interface Series {
  name: string;
  color: string;
  points: [number, number][];
  dashed?: boolean;
}

function niceStep(range: number, ticks: number): number {
  const raw = range / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const n = raw / mag;
  return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * mag;
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** One panel of a line chart: x in minutes, linear or log y. */
function panel(opts: { x: number; y: number; w: number; h: number; title: string; yLabel: string; series: Series[]; xMax: number; log?: boolean }): string {
  const { x, y, w, h, series, xMax } = opts;
  const ys = series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => Number.isFinite(v) && (!opts.log || v > 0));
  let lo = opts.log ? Math.min(...ys) : 0;
  let hi = Math.max(...ys, opts.log ? 1 : 10);
  const out: string[] = [];
  const xs = (v: number) => x + (v / (xMax || 1)) * w;
  let ys2: (v: number) => number;
  const ticks: number[] = [];
  if (opts.log) {
    lo = 10 ** Math.floor(Math.log10(lo || 0.1));
    hi = 10 ** Math.ceil(Math.log10(hi));
    ys2 = (v) => y + h - ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * h;
    for (let v = lo; v <= hi * 1.0001; v *= 10) ticks.push(v);
  } else {
    const step = niceStep(hi - lo, 5);
    hi = Math.ceil((hi * 1.05) / step) * step;
    ys2 = (v) => y + h - ((v - lo) / (hi - lo)) * h;
    for (let v = lo; v <= hi + step / 2; v += step) ticks.push(v);
  }
  out.push(`<text x="${x}" y="${y - 8}" font-size="13" font-weight="bold">${esc(opts.title)}</text>`);
  out.push(`<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="none" stroke="#999"/>`);
  for (const t of ticks) {
    const ty = ys2(t);
    out.push(`<line x1="${x}" x2="${x + w}" y1="${ty.toFixed(1)}" y2="${ty.toFixed(1)}" stroke="#eee"/>`);
    out.push(`<text x="${x - 6}" y="${(ty + 4).toFixed(1)}" font-size="11" text-anchor="end">${t >= 1 ? String(Math.round(t * 100) / 100) : t.toPrecision(1)}</text>`);
  }
  out.push(`<text x="${x - 44}" y="${y + h / 2}" font-size="11" transform="rotate(-90 ${x - 44} ${y + h / 2})" text-anchor="middle">${esc(opts.yLabel)}</text>`);
  const xStep = niceStep(xMax || 1, 10);
  for (let v = 0; v <= xMax + 1e-9; v += xStep) {
    out.push(`<line x1="${xs(v).toFixed(1)}" x2="${xs(v).toFixed(1)}" y1="${y + h}" y2="${y + h + 4}" stroke="#999"/>`);
    out.push(`<text x="${xs(v).toFixed(1)}" y="${y + h + 16}" font-size="11" text-anchor="middle">${Math.round(v * 100) / 100}</text>`);
  }
  out.push(`<text x="${x + w / 2}" y="${y + h + 32}" font-size="11" text-anchor="middle">minutes since the load began</text>`);
  let ly = y + 12;
  for (const s of series) {
    const pts = s.points.filter((p) => Number.isFinite(p[1]) && (!opts.log || p[1] > 0));
    if (!pts.length) continue;
    const d = pts.map((p, i) => `${i ? 'L' : 'M'}${xs(p[0]).toFixed(1)},${ys2(p[1]).toFixed(1)}`).join(' ');
    out.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.8"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/>`);
    out.push(`<line x1="${x + w + 12}" x2="${x + w + 32}" y1="${ly - 4}" y2="${ly - 4}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 3"' : ''}/>`);
    out.push(`<text x="${x + w + 38}" y="${ly}" font-size="11">${esc(s.name)}</text>`);
    ly += 16;
  }
  return out.join('\n');
}

export function chart(samples: Sample[], title: string): string {
  const W = 1000;
  const H = 700;
  const xMax = Math.max(...samples.map((s) => s.t / 60), 0);
  const colors = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const mem: Series[] = [];
  let c = 0;
  for (const label of LABELS) {
    if (!samples.some((s) => s.rss[label] !== undefined)) continue;
    const name = label === 'postgres' ? 'postgres RSS (all processes, sum)' : `${label} RSS`;
    mem.push({ name, color: colors[c++ % colors.length]!, points: samples.map((s) => [s.t / 60, s.rss[label] ?? NaN]) });
    if (label === 'postgres') mem.push({ name: 'postgres PSS (sum)', color: colors[(c - 1) % colors.length]!, dashed: true, points: samples.map((s) => [s.t / 60, s.pss.postgres ?? NaN]) });
  }
  mem.push({ name: 'API heap used', color: '#000', dashed: true, points: samples.map((s) => [s.t / 60, s.heapMb]) });
  const lat: Series[] = [];
  c = 0;
  for (const k of KINDS) {
    if (!samples.some((s) => s.kinds[k].n > 0)) continue;
    lat.push({ name: `${k} p99`, color: colors[c++ % colors.length]!, points: samples.map((s) => [s.t / 60, s.kinds[k].n ? s.kinds[k].p99 : NaN]) });
  }
  lat.push({ name: 'API event-loop delay p99', color: '#000', dashed: true, points: samples.map((s) => [s.t / 60, s.elP99Ms]) });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${W / 2}" y="22" font-size="15" text-anchor="middle">${esc(title)}</text>`,
    panel({ x: 70, y: 60, w: 640, h: 240, title: 'Memory (MB), every sample', yLabel: 'MB', series: mem, xMax }),
    panel({ x: 70, y: 400, w: 640, h: 240, title: 'Client-side p99 latency per 10 s window (ms, log scale)', yLabel: 'ms', series: lat, xMax, log: true }),
    '</svg>',
    '',
  ].join('\n');
}

// ---------------------------------------------------------------- the run

/** A 1×1 PNG; each upload appends its own trailing bytes after IEND, so no two are the same. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');

async function main(): Promise<number> {
  const dataDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'mas-bench-soak-'));
  const procs: Proc[] = [];
  let db: pg.Client | undefined;
  let serviceOutput: (() => string) | undefined;
  const mcpClients: Client[] = [];
  const agent = new Agent({ connections: 256, keepAliveTimeout: 30_000 });
  try {
    const mockPort = await freePort();
    const mock = start(process.execPath, ['--import', 'tsx', 'bench/mock-upstream.ts', String(mockPort)]);
    procs.push(mock);
    const mockUrl = (await mock.waitFor(/(http:\/\/127\.0\.0\.1:\d+\/v1)/))[1]!;

    // The shipped catalog (its demo media models run the jobs) plus a chat model on the mock upstream.
    const catalog = YAML.parse(await fsp.readFile(path.join(ROOT, 'config', 'models.yaml'), 'utf8')) as { providers: Record<string, unknown>; models: unknown[] };
    catalog.providers.mock = { kind: 'openai-compatible', base_url: mockUrl, timeout_seconds: 30 };
    catalog.models.push({
      id: 'bench/mock', name: 'Mock', type: 'text', generation_types: ['chat'], provider: { name: 'mock', model: 'mock' },
      pricing: { input_per_million: 100, output_per_million: 400 }, context_window: 8192, max_output_tokens: 256, default_max_tokens: 16,
    });
    const catalogFile = path.join(dataDir, 'models.yaml');
    await fsp.writeFile(catalogFile, YAML.stringify(catalog));

    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const env = {
      DATA_DIR: dataDir, CATALOG_FILE: catalogFile, PORT: String(port), HOST: '127.0.0.1', PUBLIC_BASE_URL: base,
      RATE_LIMIT_PER_MINUTE: '1000000000', LOG_LEVEL: 'warn', DEMO_COINS: '0', METRICS_TOKEN,
    };
    const server = start(process.execPath, serviceArgs('main'), env);
    procs.push(server);
    serviceOutput = () => server.output();
    let serviceExited: string | undefined;
    server.child.once('exit', (code, signal) => {
      if (cleaningUp) return;
      serviceExited = `code ${code}, signal ${signal}, ${fmt((performance.now() - loadBegan) / 1000, 0)} s after the load began`;
      stopLoad = true;
      process.stderr.write(`the service exited (${serviceExited}): stopping the load\n`);
    });
    await server.waitFor(/listening on/);
    const root = server.child.pid!;

    const cli = async (...args: string[]) => {
      const p = start(process.execPath, [...entryArgs('mas'), ...args, '--json'], env);
      return JSON.parse((await p.waitFor(/\{.*\}/))[0]) as Record<string, unknown>;
    };
    await cli('account', 'create', '--email', 'soak@example.com');
    await cli('wallet', 'topup', '--account', 'soak@example.com', '--coins', '100000000');
    const key = (await cli('key', 'create', '--account', 'soak@example.com', '--name', 'soak')).key as string;
    const jobKeys: string[] = [];
    for (let i = 0; i < JOB_KEYS; i++) jobKeys.push((await cli('key', 'create', '--account', 'soak@example.com', '--name', `soak jobs ${i}`)).key as string);

    const state = JSON.parse(await fsp.readFile(path.join(dataDir, 'postgres.json'), 'utf8')) as { password: string };
    const pgPort = Number((await fsp.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[3]);
    db = new pg.Client({ host: '127.0.0.1', port: pgPort, user: 'postgres', password: state.password, database: 'mas' });
    // A connection ended by the server (the service stopping its PostgreSQL) must not end this process before it cleans up.
    db.on('error', (err) => process.stderr.write(`database connection: ${err.message}\n`));
    await db.connect();

    const auth = (k: string) => ({ authorization: `Bearer ${k}` });
    const json = async (method: 'GET' | 'POST', url: string, k: string, body?: unknown) => {
      const res = await request(url, {
        method,
        dispatcher: agent,
        headers: { ...auth(k), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? null : JSON.stringify(body),
      });
      const text = await res.body.text();
      if (res.statusCode >= 300) throw new Error(`${method} ${new URL(url).pathname}: ${res.statusCode} ${text.slice(0, 200)}`);
      return JSON.parse(text) as Record<string, unknown>;
    };

    // ---- the operations

    const chatBody = (stream: boolean, i: number) => ({ model: 'bench/mock', messages: [{ role: 'user', content: `Hello, ledger ${i}.` }], max_tokens: 16, ...(stream ? { stream: true } : {}) });
    const chat = (i: number) => {
      const stream = STREAM_EVERY > 0 && i % STREAM_EVERY === STREAM_EVERY - 1;
      return timed(stream ? 'chat_stream' : 'chat', async () => {
        const res = await request(`${base}/api/v1/chat/completions`, {
          method: 'POST', dispatcher: agent, headers: { ...auth(key), 'content-type': 'application/json' }, body: JSON.stringify(chatBody(stream, i)),
        });
        const text = await res.body.text();
        if (res.statusCode !== 200) throw new Error(`chat: ${res.statusCode} ${text.slice(0, 200)}`);
        if (stream ? !text.includes('data: [DONE]') : !(JSON.parse(text) as { usage?: unknown }).usage) throw new Error(`chat: an incomplete answer: ${text.slice(0, 200)}`);
      });
    };

    const job = async (i: number) => {
      const k = jobKeys[i % jobKeys.length]!;
      const began = performance.now();
      try {
        let g = await timed('job_submit', () => json('POST', `${base}/api/v1/generations`, k, { model: 'mas/image-demo', prompt: `soak ${i}`, settings: { size: 128, seed: i } }));
        const id = g.id as string;
        while (g.status === 'queued' || g.status === 'running') {
          if (performance.now() - began > 120_000) throw new Error(`job ${id} still ${String(g.status)} after 120 s`);
          await sleep(200);
          g = await timed('job_poll', () => json('GET', `${base}/api/v1/generations/${id}`, k));
        }
        if (g.status !== 'succeeded') throw new Error(`job ${id} ${String(g.status)}: ${JSON.stringify(g.error)}`);
        record('job', began);
        const url = (g.output as { url?: string } | null)?.url;
        await timed('job_result', async () => {
          if (!url) throw new Error(`job ${id} succeeded with no output.url`);
          const res = await request(url, { dispatcher: agent });
          const bytes = Buffer.from(await res.body.arrayBuffer());
          if (res.statusCode !== 200 || !bytes.subarray(1, 4).equals(Buffer.from('PNG'))) throw new Error(`result of ${id}: ${res.statusCode}, ${bytes.length} bytes`);
        });
      } catch (err) {
        record('job', began, (err as Error).message);
        // A failed request is counted under its own kind already.
        if (!counted.has(err as object)) jobOwnErrors++;
      }
    };

    const upload = (i: number) =>
      timed('upload', async () => {
        const form = new FormData();
        const bytes = Buffer.concat([PNG, Buffer.from(`soak upload ${i} ${'.'.repeat(1000 + (i % 1000))}`)]);
        form.append('file', new Blob([bytes], { type: 'image/png' }), `soak-${i}.png`);
        const res = await undiciFetch(`${base}/api/v1/files`, { method: 'POST', headers: auth(key), body: form, dispatcher: agent });
        const text = await res.text();
        if (res.status !== 200) throw new Error(`upload: ${res.status} ${text.slice(0, 200)}`);
        const file = JSON.parse(text) as { id?: string; type?: string };
        if (!file.id || file.type !== 'image') throw new Error(`upload: unexpected answer ${text.slice(0, 200)}`);
      });

    const mcpFetch = ((url: string | URL, init?: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher: agent })) as unknown as typeof fetch;
    const mcpConnect = async () => {
      const client = new Client({ name: 'mas-soak', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/api/v1/mcp`), { requestInit: { headers: auth(key) }, fetch: mcpFetch }));
      return client;
    };
    const mcp = await mcpConnect();
    mcpClients.push(mcp);
    const tools = await mcp.listTools();
    for (const name of ['get_balance', 'list_models']) if (!tools.tools.some((t) => t.name === name)) throw new Error(`the MCP server has no ${name} tool`);
    const mcpCall = (i: number) => {
      if (i % 10 === 9) {
        return timed('mcp_session', async () => {
          const client = await mcpConnect();
          try {
            const listed = await client.listTools();
            if (!listed.tools.length) throw new Error('mcp: no tools listed');
          } finally {
            await client.close();
          }
        });
      }
      return timed('mcp', async () => {
        const result = i % 2 ? await mcp.callTool({ name: 'list_models', arguments: { type: 'image' } }) : await mcp.callTool({ name: 'get_balance', arguments: {} });
        if (result.isError) throw new Error(`mcp: ${JSON.stringify(result.content).slice(0, 200)}`);
      });
    };

    // Warm-up: one of each, so the first window does not hold first-call costs only.
    await chat(0).catch(() => undefined);
    await chat(STREAM_EVERY - 1).catch(() => undefined);
    await job(0);
    await upload(0).catch(() => undefined);
    await mcpCall(0).catch(() => undefined);
    for (const s of Object.values(stats)) Object.assign(s, { window: [], windowErrors: 0, all: [], ok: 0, errors: 0, dropped: 0, samples: [] });
    jobOwnErrors = 0;

    // ---- sampling

    const samples: Sample[] = [];
    const procsSeen = new Map<number, { label: Label; cmd: string; firstSeen: number }>();
    /** The single processes (API, worker, Temporal): a new pid under a label seen before is a restart. */
    const restarts: string[] = [];
    let lastCpu = new Map<number, number>();
    let lastSampleAt = performance.now();
    const takeSample = async (): Promise<Sample> => {
      const now = performance.now();
      const list = serviceProcesses(root, dataDir);
      const rss: Partial<Record<Label, number>> = {};
      const pss: Partial<Record<Label, number>> = {};
      const cpu: Partial<Record<Label, number>> = {};
      const count: Partial<Record<Label, number>> = {};
      const cpuNow = new Map<number, number>();
      for (const p of list) {
        const l = p.label as Label;
        if (!procsSeen.has(p.pid)) {
          const t = (now - loadBegan) / 1000;
          if (l !== 'postgres' && l !== 'other' && [...procsSeen.values()].some((q) => q.label === l)) {
            restarts.push(`${l} at ${fmt(t, 0)} s (new pid ${p.pid})`);
            process.stderr.write(`${fmt(t, 0)}s: a new ${l} process, pid ${p.pid}: ${p.cmd}\n`);
          }
          procsSeen.set(p.pid, { label: l, cmd: p.cmd, firstSeen: t });
        }
        rss[l] = (rss[l] ?? 0) + p.rssKb / 1024;
        pss[l] = (pss[l] ?? 0) + p.pssKb / 1024;
        count[l] = (count[l] ?? 0) + 1;
        cpuNow.set(p.pid, p.cpuTicks);
        const before = lastCpu.get(p.pid);
        if (before !== undefined) cpu[l] = (cpu[l] ?? 0) + ((p.cpuTicks - before) / TICKS / ((now - lastSampleAt) / 1000)) * 100;
      }
      lastCpu = cpuNow;
      lastSampleAt = now;
      let metrics = '';
      try {
        const res = await request(`${base}/metrics`, { dispatcher: agent, headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
        metrics = await res.body.text();
        if (res.statusCode !== 200) metrics = '';
      } catch {
        // counted as NaN
      }
      const kinds = {} as Sample['kinds'];
      for (const k of KINDS) {
        const s = stats[k];
        kinds[k] = { n: s.window.length, errors: s.windowErrors, dropped: s.dropped, p99: s.window.length ? percentile(s.window, 99) : NaN };
        s.window = [];
        s.windowErrors = 0;
      }
      return {
        t: (now - loadBegan) / 1000,
        rss,
        pss,
        cpu,
        procs: count,
        heapMb: parseMetric(metrics, 'nodejs_heap_size_used_bytes') / MB,
        heapTotalMb: parseMetric(metrics, 'nodejs_heap_size_total_bytes') / MB,
        externalMb: parseMetric(metrics, 'nodejs_external_memory_bytes') / MB,
        elP99Ms: parseMetric(metrics, 'nodejs_eventloop_lag_p99_seconds') * 1000,
        kinds,
      };
    };

    const steal = stealMeter();
    loadBegan = performance.now();
    // The first sample at t=0: memory before the load (its latency columns are empty).
    samples.push(await takeSample());
    const until = loadBegan + DURATION_MS;
    let sampling = true;
    const sampler = (async () => {
      for (let n = 1; sampling && n * SAMPLE_MS <= DURATION_MS; n++) {
        const wait = loadBegan + n * SAMPLE_MS - performance.now();
        if (wait > 0) await sleep(wait);
        if (!sampling) break;
        const s = await takeSample();
        samples.push(s);
        const p = (k: Kind) => `${k} ${s.kinds[k].n}/${fmt(s.kinds[k].p99, 0)}ms${s.kinds[k].errors ? ` ${s.kinds[k].errors} err` : ''}`;
        process.stderr.write(
          `${fmt(s.t, 0)}s rss ${LABELS.filter((l) => s.rss[l] !== undefined).map((l) => `${l} ${fmt(s.rss[l]!, 0)}`).join(' ')} heap ${fmt(s.heapMb, 0)} el ${fmt(s.elP99Ms, 1)}ms | ` +
            `${(['chat', 'chat_stream', 'job', 'upload', 'mcp'] as Kind[]).map(p).join(', ')}\n`,
        );
      }
    })();

    await Promise.all([
      drive('chat', CHAT_RATE, 64, until, chat),
      drive('job', JOB_RATE, 5 * JOB_KEYS, until, job),
      drive('upload', UPLOAD_RATE, 8, until, upload),
      drive('mcp', MCP_RATE, 16, until, mcpCall),
    ]);
    const loadEnded = performance.now();
    if (serviceExited) throw new Error(`the service exited during the run (${serviceExited})`);
    // The last window: whatever finished after the previous sample, unless that was just now.
    sampling = false;
    await sampler;
    if (performance.now() - lastSampleAt > 2000) samples.push(await takeSample());
    const stolen = steal();

    // ---- after the load: every job ended, every hold ended, every wallet equal to its ledger

    const settleBegan = Date.now();
    let unfinishedJobs = 0;
    for (;;) {
      unfinishedJobs = (await db.query(`select count(*)::int as n from generations where status in ('queued', 'running')`)).rows[0].n as number;
      if (unfinishedJobs === 0 || Date.now() - settleBegan > 120_000) break;
      await sleep(250);
    }
    const holdsAtFirst = (await db.query(`select count(*)::int as n from holds where status = 'open'`)).rows[0].n as number;
    let openHolds = holdsAtFirst;
    const holdsBegan = Date.now();
    while (openHolds > 0 && Date.now() - holdsBegan < 30_000) {
      await sleep(500);
      openHolds = (await db.query(`select count(*)::int as n from holds where status = 'open'`)).rows[0].n as number;
    }
    const holdTotals = (await db.query(`select status, count(*)::int as n from holds group by status order by status`)).rows as { status: string; n: number }[];
    const wallets = (
      await db.query(
        `select w.account_id, a.email,
                w.subscription_micro::text as sub, w.purchased_micro::text as pur, w.held_micro::text as held,
                coalesce((select sum(amount_micro) from ledger_entries l where l.account_id = w.account_id and pocket = 'subscription'), 0)::text as l_sub,
                coalesce((select sum(amount_micro) from ledger_entries l where l.account_id = w.account_id and pocket = 'purchased'), 0)::text as l_pur,
                coalesce((select sum(amount_micro) from ledger_entries l where l.account_id = w.account_id and pocket = 'held'), 0)::text as l_held,
                coalesce((select sum(amount_micro) from holds h where h.account_id = w.account_id and status = 'open'), 0)::text as h_open,
                (select count(*) from ledger_entries l where l.account_id = w.account_id)::int as entries
         from wallets w join accounts a on a.id = w.account_id`,
      )
    ).rows as { account_id: string; email: string; sub: string; pur: string; held: string; l_sub: string; l_pur: string; l_held: string; h_open: string; entries: number }[];
    const walletMismatches = wallets.filter((w) => w.sub !== w.l_sub || w.pur !== w.l_pur || w.held !== w.l_held || w.held !== w.h_open);
    const jobStatuses = (await db.query(`select status, count(*)::int as n from generations group by status order by status`)).rows as { status: string; n: number }[];

    // ---- outputs

    const present = LABELS.filter((l) => samples.some((s) => s.rss[l] !== undefined));
    const header = [
      't_s',
      ...present.flatMap((l) => [`rss_${l}_mb`, ...(l === 'postgres' ? ['pss_postgres_mb', 'n_postgres'] : []), `cpu_${l}_pct`]),
      'heap_used_mb', 'heap_total_mb', 'external_mb', 'eventloop_p99_ms',
      ...KINDS.flatMap((k) => [`${k}_n`, `${k}_errors`, `${k}_p99_ms`]),
    ];
    const rows = samples.map((s) =>
      [
        fmt(s.t, 1),
        ...present.flatMap((l) => [fmt(s.rss[l] ?? NaN, 1), ...(l === 'postgres' ? [fmt(s.pss.postgres ?? NaN, 1), String(s.procs.postgres ?? '')] : []), fmt(s.cpu[l] ?? NaN, 1)]),
        fmt(s.heapMb, 1), fmt(s.heapTotalMb, 1), fmt(s.externalMb, 1), fmt(s.elP99Ms, 2),
        ...KINDS.flatMap((k) => [String(s.kinds[k].n), String(s.kinds[k].errors), fmt(s.kinds[k].p99, 1)]),
      ].map((v) => (v === '–' ? '' : v)).join(','),
    );
    await fsp.mkdir(OUT_DIR, { recursive: true });
    await fsp.writeFile(path.join(OUT_DIR, 'soak.csv'), `${header.join(',')}\n${rows.join('\n')}\n`);
    const durationText = `${fmt(DURATION_MS / 60_000, DURATION_MS % 60_000 ? 1 : 0)} min`;
    await fsp.writeFile(
      path.join(OUT_DIR, 'soak.svg'),
      chart(samples, `Soak, ${durationText}: ${CHAT_RATE} chat/s, ${JOB_RATE} jobs/s, ${UPLOAD_RATE} uploads/s, ${MCP_RATE} MCP calls/s (${new Date().toISOString().slice(0, 16)}Z)`),
    );

    // Warm-up excluded from the slopes: the first minute or 20 %, whichever is longer, while 3 samples remain.
    const lastT = samples[samples.length - 1]!.t;
    let warmup = Math.max(60, 0.2 * lastT);
    if (samples.filter((s) => s.t >= warmup).length < 3) warmup = 0.2 * lastT;
    const steady = samples.filter((s) => s.t >= warmup);
    const slopeOf = (pick: (s: Sample) => number | undefined) =>
      slope(steady.map((s) => [s.t / 60, pick(s) ?? NaN] as [number, number]).filter((p) => Number.isFinite(p[1])));
    const first = samples[0]!;
    const last = samples[samples.length - 1]!;
    const third = (DURATION_MS / 3);
    const p99In = (k: Kind, from: number, to: number) => {
      const v = stats[k].all.filter(([t]) => t >= from && t < to).map(([, ms]) => ms);
      return v.length ? percentile(v, 99) : NaN;
    };
    const p50All = (k: Kind) => (stats[k].all.length ? percentile(stats[k].all.map(([, ms]) => ms), 50) : NaN);
    const requests = REQUEST_KINDS.reduce((a, k) => a + stats[k].ok + stats[k].errors, 0);
    const errors = REQUEST_KINDS.reduce((a, k) => a + stats[k].errors, 0) + jobOwnErrors + stats.mcp_session.errors;
    const dropped = KINDS.reduce((a, k) => a + stats[k].dropped, 0);
    const errorRate = errors / Math.max(1, requests + stats.job.ok + stats.job.errors);
    const els = samples.slice(1).map((s) => s.elP99Ms).filter(Number.isFinite);
    const loadSeconds = (loadEnded - loadBegan) / 1000;

    const failures: string[] = [];
    if (errorRate > MAX_ERROR_RATE) failures.push(`errors ${errors} (${fmt(errorRate * 100, 2)} % of requests and jobs) above ${fmt(MAX_ERROR_RATE * 100, 2)} %`);
    if (openHolds > 0) failures.push(`${openHolds} holds left open`);
    if (unfinishedJobs > 0) failures.push(`${unfinishedJobs} jobs still queued or running 120 s after the load`);
    if (restarts.length) failures.push(`service processes started again during the run: ${restarts.join(', ')}`);
    if (walletMismatches.length) failures.push(`${walletMismatches.length} wallets differ from their ledger entries or open holds`);

    const procLines = [...procsSeen.values()];
    // The service's own warnings and errors (pino JSON at level 40 and above, or any other line that names an error).
    const serviceLog = server.output();
    const problems = serviceLog.split('\n').filter((line) => {
      try {
        return ((JSON.parse(line) as { level?: number }).level ?? 0) >= 40;
      } catch {
        return /error|fatal|exception|warn/i.test(line);
      }
    });
    const describe = (l: Label) => {
      const cmds = [...new Set(procLines.filter((p) => p.label === l).map((p) => p.cmd.replace(ROOT + '/', '').replace(os.tmpdir(), '$TMP').slice(0, 60)))];
      return l === 'postgres' ? `postmaster and its children (up to ${Math.max(...samples.map((s) => s.procs.postgres ?? 0))} processes)` : cmds.slice(0, 2).join('; ');
    };
    const lines = [
      `## Soak: ${durationText}`,
      '',
      `Machine: ${machine()}`,
      `Date: ${new Date().toISOString()}; one run; service started as \`node ${serviceArgs('main').join(' ')}\` (worker ${present.includes('worker') ? 'in its own process' : 'in the API process'}), embedded PostgreSQL and Temporal dev server; ` +
        `load ${fmt(loadSeconds, 0)} s at ${CHAT_RATE} chat completions/s (every ${STREAM_EVERY}th streamed, mock upstream), ${JOB_RATE} image jobs/s (mas/image-demo, 128 px, polled every 200 ms, result fetched), ` +
        `${UPLOAD_RATE} uploads/s (1 KB PNG), ${MCP_RATE} MCP calls/s (SDK client; every 10th a fresh session listing tools); samples every ${SAMPLE_MS / 1000} s.`,
      `CPU time taken by the hypervisor for other guests (steal) during the load: ${stolen}`,
      '',
      '| kind | succeeded | errors | dropped (in-flight bound) | p50 ms | p99 ms, first third | p99 ms, last third |',
      '|---|---|---|---|---|---|---|',
      ...KINDS.map((k) => `| ${k} | ${stats[k].ok} | ${stats[k].errors} | ${stats[k].dropped} | ${fmt(p50All(k), 1)} | ${fmt(p99In(k, 0, third), 1)} | ${fmt(p99In(k, 2 * third, Infinity), 1)} |`),
      '',
      `HTTP requests: ${requests} (${fmt(requests / loadSeconds, 1)}/s; MCP sessions and the ${stats.job.ok + stats.job.errors} jobs as wholes not counted), errors ${errors} (${fmt(errorRate * 100, 3)} %), dropped arrivals ${dropped}. ` +
        `\`job\` is submit to succeeded as the client saw it (polling every 200 ms).`,
      ...KINDS.filter((k) => stats[k].samples.length).map((k) => `First errors, ${k}: ${stats[k].samples.slice(0, 3).map((e) => `\`${e.replace(/`/g, "'").replace(/\s+/g, ' ')}\``).join('; ')}`),
      '',
      `| process | what | RSS MB at start | RSS MB at end | peak sample | slope MB/min after ${fmt(warmup, 0)} s | CPU % of a core, mean |`,
      '|---|---|---|---|---|---|---|',
      ...present.map((l) => {
        const cpus = samples.map((s) => s.cpu[l]).filter((v): v is number => v !== undefined);
        return `| ${l} | ${describe(l)} | ${fmt(first.rss[l] ?? NaN, 0)} | ${fmt(last.rss[l] ?? NaN, 0)} | ${fmt(Math.max(...samples.map((s) => s.rss[l] ?? 0)), 0)} | ${fmt(slopeOf((s) => s.rss[l]), 2)} | ${fmt(cpus.reduce((a, b) => a + b, 0) / Math.max(1, cpus.length), 0)} |`;
      }),
      ...(present.includes('postgres')
        ? [`| postgres (PSS) | shared pages counted once | ${fmt(first.pss.postgres ?? NaN, 0)} | ${fmt(last.pss.postgres ?? NaN, 0)} | ${fmt(Math.max(...samples.map((s) => s.pss.postgres ?? 0)), 0)} | ${fmt(slopeOf((s) => s.pss.postgres), 2)} | |`]
        : []),
      `| API heap used | nodejs_heap_size_used_bytes | ${fmt(first.heapMb, 0)} | ${fmt(last.heapMb, 0)} | ${fmt(Math.max(...samples.map((s) => s.heapMb).filter(Number.isFinite)), 0)} | ${fmt(slopeOf((s) => s.heapMb), 2)} | |`,
      '',
      `API event-loop delay p99 per window: median ${fmt(els.length ? percentile(els, 50) : NaN, 1)} ms, max ${fmt(Math.max(...els), 1)} ms.`,
      '',
      `After the load: jobs ${jobStatuses.map((r) => `${r.status} ${r.n}`).join(', ')} (${unfinishedJobs} unfinished); ` +
        `holds ${holdTotals.map((r) => `${r.status} ${r.n}`).join(', ')}; **open holds: ${openHolds}**${holdsAtFirst !== openHolds ? ` (${holdsAtFirst} at the first look, once the jobs had ended)` : ''}; ` +
        `wallets equal to the sum of their ledger entries per pocket, held = open holds: ${wallets.length - walletMismatches.length}/${wallets.length} ` +
        `(${wallets.reduce((a, w) => a + w.entries, 0)} ledger entries).`,
      ...walletMismatches.map((w) => `Wallet ${w.email}: subscription ${w.sub} vs ledger ${w.l_sub}, purchased ${w.pur} vs ${w.l_pur}, held ${w.held} vs ledger ${w.l_held} vs open holds ${w.h_open} (micro-coins)`),
      '',
      `Service log lines at warn or above: ${problems.length}${problems.length ? ` (whole log: ${logFile}); first: ${problems.slice(0, 5).map((l) => `\`${l.slice(0, 400).replace(/`/g, "'")}\``).join('; ')}` : ''}`,
      restarts.length ? `**Processes started again during the run**: ${restarts.join(', ')}` : 'No service process was started again during the run.',
      '',
      failures.length ? `**FAILED**: ${failures.join('; ')}` : 'Passed: errors within the threshold, no hold left open, every wallet equal to its ledger.',
      `CSV: ${path.relative(process.cwd(), path.join(OUT_DIR, 'soak.csv'))}; chart: ${path.relative(process.cwd(), path.join(OUT_DIR, 'soak.svg'))}`,
      '',
    ];
    process.stdout.write(lines.join('\n'));
    return failures.length ? 1 : 0;
  } catch (err) {
    if (serviceOutput) process.stderr.write(`The service's whole output: ${logFile}\n`);
    for (const p of procs) process.stderr.write(`--- ${p.child.spawnargs.slice(-2).join(' ')}\n${p.output().slice(-3000)}\n`);
    throw err;
  } finally {
    cleaningUp = true;
    for (const c of mcpClients) await c.close().catch(() => undefined);
    await db?.end().catch(() => undefined);
    for (const p of procs.reverse()) await p.stop();
    await agent.close().catch(() => undefined);
    if (serviceOutput) await fsp.writeFile(logFile, serviceOutput()).catch(() => undefined);
    await fsp.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

process.exitCode = await main();
