import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

/**
 * The one way tests, scripts and benchmarks start this project's processes and others (the
 * service, its CLI, servers beside it): a child whose output is kept (and optionally written to a
 * log file, keys masked), waited on for a line, and stopped by its own PID.
 */

/** The clone's root folder. */
export const ROOT = path.resolve(import.meta.dirname, '..', '..');

/** The service's entry points (package.json: start, start:api, worker, migrate, mas). */
export type Entry = 'main' | 'api' | 'worker' | 'migrate' | 'mas';

/**
 * The node arguments that run an entry point: the built JavaScript in dist/, as production
 * runs it (`npm ci` and the tests' global setup build it), or the TypeScript sources through
 * tsx (`from: 'sources'`; one test proves that path still starts and serves).
 */
export function entryArgs(entry: Entry, from: 'dist' | 'sources' = 'dist'): string[] {
  if (from === 'sources') return ['--import', 'tsx', `${entry}.ts`];
  const file = path.join(ROOT, 'dist', `${entry}.js`);
  if (!existsSync(file)) throw new Error(`${path.relative(ROOT, file)} is missing: run npm run build (npm ci does)`);
  return [file];
}

export interface Spawned {
  child: ChildProcess;
  /** Everything written to stdout and stderr so far (the last 2 MB), keys masked with `redact: 'all'`. */
  output: () => string;
  /** Resolves with the first match of `pattern` in the output; rejects when the process exits first or after `timeoutMs`. */
  waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpMatchArray>;
  /** The exit code (null: killed by a signal, or it could not start). */
  exited: Promise<number | null>;
  running: () => boolean;
  /** SIGTERM (or `signal`), then SIGKILL after `graceMs`; resolves once it has exited. */
  stop: (signal?: NodeJS.Signals, graceMs?: number) => Promise<void>;
  /** Peak resident memory (VmHWM) so far, in MiB. */
  peakRssMiB: () => number;
  /** The sum of the peak resident memories of the process and its running descendants, in MiB. */
  peakTreeRssMiB: () => number;
}

export interface SpawnOptions {
  /** The child's environment: `env` alone (with PATH and HOME), or over this process's with `inheritEnv`. */
  env?: Record<string, string | undefined>;
  inheritEnv?: boolean;
  cwd?: string;
  /** Also append the output to this file. */
  logFile?: string;
  /** Mask API keys and tokens (`mas_…`) in the log file (`'log'`), or in the kept output too (`'all'`). */
  redact?: 'log' | 'all';
  /** A process group of its own (everything it starts can then be signalled together). */
  detached?: boolean;
  /** How it is called in errors ("the server", "worker-1"). */
  name?: string;
}

const KEEP = 2_000_000;

export function spawnProcess(command: string, args: string[], opts: SpawnOptions = {}): Spawned {
  const env = opts.inheritEnv ? { ...process.env, ...opts.env } : { PATH: process.env.PATH, HOME: process.env.HOME, ...opts.env };
  const child = spawn(command, args, { cwd: opts.cwd ?? ROOT, env: env as NodeJS.ProcessEnv, detached: opts.detached ?? false, stdio: ['ignore', 'pipe', 'pipe'] });
  const name = opts.name ?? path.basename(args.find((a) => !a.startsWith('-') && a !== 'tsx') ?? command);
  let out = '';
  const file = opts.logFile ? createWriteStream(opts.logFile, { flags: 'a' }) : undefined;
  file?.on('error', () => undefined);
  const listeners = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    const raw = chunk.toString();
    const masked = opts.redact ? raw.replace(/mas_[A-Za-z0-9_-]{8,}/g, 'mas_…') : raw;
    const text = opts.redact === 'all' ? masked : raw;
    out = out.length + text.length > KEEP ? (out + text).slice(-KEEP) : out + text;
    file?.write(masked);
    for (const l of listeners) l();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  child.stdout!.on('error', () => undefined);
  child.stderr!.on('error', () => undefined);
  let done = false;
  const exited = new Promise<number | null>((resolve) => {
    child.once('error', (err) => {
      out += `\n${err.message}`;
      done = true;
      for (const l of listeners) l();
      resolve(null);
    });
    child.once('exit', (code) => {
      done = true;
      file?.end();
      for (const l of listeners) l();
      resolve(code);
    });
  });
  return {
    child,
    output: () => out,
    exited,
    running: () => !done,
    waitFor(pattern, timeoutMs = 120_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = out.match(pattern);
          if (m) {
            cleanup();
            resolve(m);
          } else if (done) {
            cleanup();
            reject(new Error(`${name} exited before printing ${pattern}; its output:\n${out.slice(-8000)}`));
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`${name} did not print ${pattern} within ${timeoutMs} ms; its output so far:\n${out.slice(-8000)}`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
    async stop(signal = 'SIGTERM', graceMs = 30_000) {
      if (done) return;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
    peakRssMiB: () => (child.pid === undefined ? NaN : vmHwmKiB(child.pid) / 1024),
    peakTreeRssMiB: () => (child.pid === undefined ? NaN : processTree(child.pid).reduce((sum, pid) => sum + (vmHwmKiB(pid) || 0), 0) / 1024),
  };
}

/** Runs one of the service's entry points with plain node (dist/ unless `from: 'sources'`). */
export function spawnEntry(entry: Entry, opts: SpawnOptions & { from?: 'dist' | 'sources'; nodeArgs?: string[] } = {}): Spawned {
  return spawnProcess(process.execPath, [...(opts.nodeArgs ?? []), ...entryArgs(entry, opts.from)], { name: entry, ...opts });
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command to its end and resolves with its exit code and whole output, whatever the code
 * (the caller judges it); rejects only when it cannot start. Waits for 'close', so no output is lost.
 */
export function runCollected(cmd: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; input?: string } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: options.cwd, env: options.env, stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
    if (options.input !== undefined) child.stdin!.end(options.input);
  });
}

/** The operator CLI (`mas`, dist/mas.js) run to its end with `env` (PATH and HOME added). */
export function runMas(args: string[], env: Record<string, string | undefined>, opts: { input?: string } = {}): Promise<RunResult> {
  return runCollected(process.execPath, [...entryArgs('mas'), ...args], { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env } as NodeJS.ProcessEnv, ...opts });
}

/** A process's VmHWM in KiB (NaN when it is gone). */
function vmHwmKiB(pid: number): number {
  try {
    return Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  } catch {
    return NaN;
  }
}

/** pid and its running descendants, from /proc/<pid>/stat's parent field. */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
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
