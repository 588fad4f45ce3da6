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

export { freePort } from '../adapters/embedded/postgres.ts';

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
