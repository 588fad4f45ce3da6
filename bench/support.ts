import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '..');

export interface Proc {
  child: ChildProcess;
  output: () => string;
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Peak resident memory (VmHWM) so far, in MiB. */
  peakRssMiB(): number;
  /**
   * The process and every descendant still running (a Python server's workers, a database
   * engine it runs as a subprocess): the sum of their peak resident memories (VmHWM), in MiB.
   * A sum of peaks, so at most a little above the tree's true peak.
   */
  peakTreeRssMiB(): number;
  stop(): Promise<void>;
}

export function start(command: string, args: string[], env: Record<string, string | undefined> = {}): Proc {
  const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  return {
    child,
    output: () => out,
    waitFor(pattern, timeoutMs = 180_000) {
      return new Promise((resolve, reject) => {
        const started = Date.now();
        const tick = setInterval(() => {
          const m = out.match(pattern);
          if (m) {
            clearInterval(tick);
            resolve(m);
          } else if (child.exitCode !== null || Date.now() - started > timeoutMs) {
            clearInterval(tick);
            reject(new Error(`waiting for ${pattern}:\n${out.slice(-3000)}`));
          }
        }, 50);
      });
    },
    peakRssMiB() {
      return child.pid === undefined ? NaN : vmHwmKiB(child.pid) / 1024;
    },
    peakTreeRssMiB() {
      if (child.pid === undefined) return NaN;
      return processTree(child.pid).reduce((sum, pid) => sum + (vmHwmKiB(pid) || 0), 0) / 1024;
    },
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    },
  };
}

/** A process's VmHWM in KiB (NaN when it is gone). */
function vmHwmKiB(pid: number): number {
  try {
    return Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  } catch {
    return NaN;
  }
}

/** pid and its running descendants, from /proc/<pid>/stat's parent field. */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The command name (field 2) is in parentheses and may hold spaces: read after its last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // gone meanwhile
    }
  }
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) tree.push(...(children.get(tree[i]!) ?? []));
  return tree;
}

import { freePort } from '../adapters/embedded/postgres.ts';

export { freePort };

/**
 * The node arguments that run one of the service's entry points (`main`, `api`, `worker`,
 * `migrate`) as production runs it: the built JavaScript in dist/ when it is there (`npm ci`
 * builds it), else the TypeScript sources through tsx.
 */
export function serviceArgs(entry: 'main' | 'api' | 'worker' | 'migrate'): string[] {
  return fs.existsSync(path.join(ROOT, 'dist', `${entry}.js`)) ? [`dist/${entry}.js`] : ['--import', 'tsx', `${entry}.ts`];
}

export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

export function machine(): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  return `${os.cpus().length} × ${cpu}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.type()} ${os.release()}, Node ${process.version}`;
}

/**
 * The share of the machine's CPU time the hypervisor gave to others (steal) between two
 * calls, from /proc/stat: on a shared virtual machine this says how much a run was disturbed.
 */
export function stealMeter(): () => string {
  const read = () => {
    try {
      const fields = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
      return { steal: fields[7] ?? 0, total: fields.reduce((a, b) => a + b, 0) };
    } catch {
      return undefined;
    }
  };
  const start = read();
  return () => {
    const end = read();
    if (!start || !end || end.total === start.total) return 'unknown';
    return `${((100 * (end.steal - start.steal)) / (end.total - start.total)).toFixed(1)}%`;
  };
}

/**
 * The chat benchmarks' set-up: the mock upstream (bench/mock-upstream.ts), a catalog with one
 * model on it (`bench/mock`), the service API-only (RUN_WORKER=false, the rate limit raised,
 * LOG_LEVEL=warn) with `nodeArgs` before its entry point, and an account with coins and a key
 * made through the CLI. Every process started is pushed onto `procs` for the caller to stop.
 */
export async function startChatService(
  dataDir: string,
  procs: Proc[],
  nodeArgs: string[] = [],
  /** More catalog (YAML lines of providers and of models, `{mock}` standing for the mock's URL) and environment. */
  more: { providers?: string; models?: string; env?: Record<string, string> } = {},
) {
  const mockPort = await freePort();
  const mock = start(process.execPath, ['--import', 'tsx', 'bench/mock-upstream.ts', String(mockPort)]);
  procs.push(mock);
  const mockUrl = (await mock.waitFor(/(http:\/\/127\.0\.0\.1:\d+\/v1)/))[1]!;
  const catalog = path.join(dataDir, 'models.yaml');
  fs.writeFileSync(
    catalog,
    `providers:\n  mock: { kind: openai-compatible, base_url: "${mockUrl}", timeout_seconds: 30 }\n${(more.providers ?? '').replaceAll('{mock}', mockUrl)}` +
      `models:\n  - { id: bench/mock, name: Mock, type: text, generation_types: [chat], provider: { name: mock, model: mock },\n` +
      `      pricing: { input_per_million: 100, output_per_million: 400 }, context_window: 8192, max_output_tokens: 256, default_max_tokens: 16 }\n${(more.models ?? '').replaceAll('{mock}', mockUrl)}`,
  );
  const port = await freePort();
  const env = { DATA_DIR: dataDir, CATALOG_FILE: catalog, PORT: String(port), HOST: '127.0.0.1', RATE_LIMIT_PER_MINUTE: '1000000000', LOG_LEVEL: 'warn', DEMO_COINS: '0', RUN_WORKER: 'false', ...more.env };
  const ours = start(process.execPath, [...nodeArgs, ...serviceArgs('main')], env);
  procs.push(ours);
  await ours.waitFor(/listening on/);
  const cli = (...args: string[]) => start('npm', ['run', '--silent', 'mas', '--', ...args, '--json'], env);
  await cli('account', 'create', '--email', 'bench@example.com').waitFor(/"id"/);
  await cli('wallet', 'topup', '--account', 'bench@example.com', '--coins', '100000000').waitFor(/"object"/);
  const key = JSON.parse((await cli('key', 'create', '--account', 'bench@example.com').waitFor(/\{.*\}/))[0]).key as string;
  return { mockUrl, port, env, ours, key };
}
