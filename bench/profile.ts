import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { machine, percentile, startChatService, type Proc } from './support.ts';
import { NODE_FLAGS as SERVICE_NODE_FLAGS } from '../config/node-flags.ts';

/**
 * npm run bench:profile — where the API process spends its CPU on the chat hot path: the
 * service (as production runs it, RUN_WORKER=false) under `--cpu-prof` in front of the mock
 * upstream, SAMPLES chats one at a time then DURATION seconds at c=32 with real billing; the
 * profile's self time grouped by package (or by folder of this project) and its top functions.
 * The .cpuprofile is left in PROFILE_DIR (default: a temporary folder) for Chrome DevTools.
 * NODE_FLAGS adds node flags to the service's (e.g. `--max-semi-space-size=4`); PROFILE=0 runs
 * it without the profiler (to read its peak RSS alone). ALLOC=1 also runs it under
 * `--trace-gc --trace-gc-nvp` and sums V8's `allocated=` (bytes allocated between collections)
 * over each phase: the bytes the process allocates per chat.
 */
const PROFILE = process.env.PROFILE !== '0';
const NODE_FLAGS = (process.env.NODE_FLAGS ?? '').split(' ').filter(Boolean);
const ALLOC = process.env.ALLOC === '1';
const SAMPLES = Number(process.env.SAMPLES ?? 3000);
const DURATION = Number(process.env.DURATION ?? 10);
const body = JSON.stringify({ model: 'bench/mock', messages: [{ role: 'user', content: 'Hello, ledger.' }], max_tokens: 16 });

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

/** node_modules/<package> (scoped too), a folder of this project, or node's own. */
function owner(url: string): string {
  if (!url) return '(native / V8)';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const parts = url.slice(nm + 'node_modules/'.length).split('/');
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  if (url.startsWith('node:')) return 'node (built-in modules)';
  const dist = url.indexOf('/dist/');
  if (dist >= 0) return `this service: ${url.slice(dist + 6).split('/').slice(0, -1).join('/') || '.'}`;
  return url;
}

export function summarize(profile: Profile): { total: number; byOwner: [string, number][]; byFunction: [string, number][] } {
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  let total = 0;
  const byOwner = new Map<string, number>();
  const byFunction = new Map<string, number>();
  for (const [id, us] of self) {
    const n = nodes.get(id)!;
    const { functionName, url, lineNumber } = n.callFrame;
    if (functionName === '(idle)') continue;
    total += us;
    const o = functionName === '(garbage collector)' ? '(garbage collector)' : functionName === '(program)' ? '(program)' : owner(url);
    byOwner.set(o, (byOwner.get(o) ?? 0) + us);
    const f = `${functionName || '(anonymous)'} ${url ? `${url.split('/').slice(-2).join('/')}:${lineNumber + 1}` : ''}`;
    byFunction.set(f, (byFunction.get(f) ?? 0) + us);
  }
  const sort = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return { total, byOwner: sort(byOwner), byFunction: sort(byFunction) };
}

async function main() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-profile-'));
  const profileDir = process.env.PROFILE_DIR ?? path.join(dataDir, 'profile');
  const procs: Proc[] = [];
  try {
    const { port, ours, key } = await startChatService(dataDir, procs, [
      ...(PROFILE ? ['--cpu-prof', '--cpu-prof-dir', profileDir] : []),
      ...(ALLOC ? ['--trace-gc', '--trace-gc-nvp'] : []),
      ...NODE_FLAGS,
    ]);
    // V8's GC trace: each line has the ms since the process started and the bytes allocated since
    // the previous collection. It reaches the pipe late (stdio buffering), so phases are told
    // apart by those times, not by where the lines arrive; read after the process has exited.
    const born = await startedMs(ours.child.pid!);
    const allocatedIn = (from: number, to: number) =>
      [...ours.output().matchAll(/^\[[^\]]*\]\s+(\d+) ms: .*\ballocated=(\d+)/gm)].filter((m) => Number(m[1]) >= from - born && Number(m[1]) < to - born).reduce((sum, m) => sum + Number(m[2]), 0);
    const url = `http://127.0.0.1:${port}/api/v1/chat/completions`;
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${key}` };

    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const one = () =>
      new Promise<number>((resolve, reject) => {
        const began = process.hrtime.bigint();
        http
          .request(url, { method: 'POST', agent, headers }, (res) => {
            res.resume();
            res.on('end', () => (res.statusCode === 200 ? resolve(Number(process.hrtime.bigint() - began) / 1e6) : reject(new Error(`status ${res.statusCode}`))));
          })
          .on('error', reject)
          .end(body);
      });
    const cpuBefore = await cpuMs(ours.child.pid!);
    const tBefore = await uptimeMs();
    const ms: number[] = [];
    for (let i = 0; i < SAMPLES; i++) ms.push(await one());
    const cpuSequential = (await cpuMs(ours.child.pid!)) - cpuBefore;
    const tSequential = await uptimeMs();
    const loaded = await autocannon({ url, method: 'POST', headers, body, connections: 32, duration: DURATION });
    const cpuLoaded = (await cpuMs(ours.child.pid!)) - cpuBefore - cpuSequential;
    const tLoaded = await uptimeMs();
    const peak = ours.peakRssMiB();
    const rssNow = Number(/VmRSS:\s+(\d+)/.exec(await fs.readFile(`/proc/${ours.child.pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
    await ours.stop();
    const head = [
      `Machine: ${machine()}`,
      `Date: ${new Date().toISOString()}; node flags: ${[...SERVICE_NODE_FLAGS, ...NODE_FLAGS].join(' ')}${PROFILE ? ', under --cpu-prof' : ''}; ${SAMPLES} chats one at a time (p50 ${percentile(ms, 50).toFixed(2)} ms, p99 ${percentile(ms, 99).toFixed(2)} ms), then ${DURATION} s at c=32 (${Math.round(loaded.requests.average)} req/s, p50 ${loaded.latency.p50} ms, p99 ${loaded.latency.p99} ms).`,
      `API process: peak RSS ${peak.toFixed(0)} MiB, ${rssNow.toFixed(0)} MiB after the load; CPU per chat ${(cpuSequential / SAMPLES).toFixed(3)} ms one at a time, ${(cpuLoaded / loaded.requests.total).toFixed(3)} ms at c=32.`,
      ...(ALLOC
        ? [`Allocated per chat (V8's GC trace, whole collections only): ${(allocatedIn(tBefore, tSequential) / SAMPLES / 1024).toFixed(1)} KiB one at a time, ${(allocatedIn(tSequential, tLoaded) / loaded.requests.total / 1024).toFixed(1)} KiB at c=32.`]
        : []),
    ];
    if (!PROFILE) {
      process.stdout.write(`${head.join('\n')}\n`);
      return;
    }
    const file = (await fs.readdir(profileDir)).find((f) => f.endsWith('.cpuprofile'))!;
    const { total, byOwner, byFunction } = summarize(JSON.parse(await fs.readFile(path.join(profileDir, file), 'utf8')) as Profile);
    const pct = (us: number) => `${((us / total) * 100).toFixed(1)} %`;
    // Node 20 runs promise hooks for every promise once any AsyncLocalStorage exists; Node 24's AsyncLocalStorage (AsyncContextFrame) needs none.
    const hooks = byFunction.filter(([f]) => /async_hooks|promise_hooks|\b(promiseInitHook|promiseBeforeHook|promiseAfterHook|promiseResolveHook|emitInitScript|emitInitNative)\b/.test(f)).reduce((sum, [, us]) => sum + us, 0);
    const lines = [
      ...head,
      `Samples in the profile: ${(total / 1000).toFixed(0)} ms (start-up included). Self time in async hooks and promise hooks: ${pct(hooks)}.`,
      '',
      '| where (self time) | share |',
      '|---|---|',
      ...byOwner.slice(0, 16).map(([o, us]) => `| ${o} | ${pct(us)} |`),
      '',
      '| top functions (self time) | share |',
      '|---|---|',
      ...byFunction.slice(0, 25).map(([f, us]) => `| ${f.replace(/\|/g, '\\|')} | ${pct(us)} |`),
      '',
      `Profile: ${path.join(profileDir, file)}`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    for (const p of procs.reverse()) await p.stop();
    if (!process.env.PROFILE_DIR) await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** Milliseconds since the machine booted (/proc/uptime). */
async function uptimeMs(): Promise<number> {
  return Number((await fs.readFile('/proc/uptime', 'utf8')).split(' ')[0]) * 1000;
}

/** When a process started, in ms since boot (/proc/<pid>/stat field 22, clock ticks of 10 ms). */
async function startedMs(pid: number): Promise<number> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]) * 10;
}

/** User + system CPU time of a process so far, in ms (/proc/<pid>/stat, clock ticks of 10 ms). */
async function cpuMs(pid: number): Promise<number> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

await main();
