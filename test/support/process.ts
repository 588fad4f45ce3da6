import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '../..');

export interface Spawned {
  child: ChildProcess;
  /** Everything written to stdout and stderr so far. */
  output: () => string;
  waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpMatchArray>;
  exited: Promise<number | null>;
}

/** Runs a command of this project (`node --import tsx main.ts`, the CLI) as a real process. */
export function spawnProject(args: string[], env: Record<string, string | undefined>, command = process.execPath): Spawned {
  const child = spawn(command, args, {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const listeners = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    out += chunk.toString();
    for (const l of listeners) l();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    output: () => out,
    exited,
    waitFor(pattern, timeoutMs = 60_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = out.match(pattern);
          if (m) {
            cleanup();
            resolve(m);
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`timed out waiting for ${pattern}; output so far:\n${out}`));
        }, timeoutMs);
        const onExit = () => {
          cleanup();
          reject(new Error(`process exited while waiting for ${pattern}; output:\n${out}`));
        };
        const cleanup = () => {
          clearTimeout(timer);
          listeners.delete(check);
          child.off('exit', onExit);
        };
        listeners.add(check);
        child.once('exit', onExit);
        check();
      });
    },
  };
}

export function serverArgs(): string[] {
  return ['--import', 'tsx', 'main.ts'];
}

export { freePort } from '../../adapters/embedded/postgres.ts';

/** Runs the operator CLI through the README's own command and returns its exit code and streams. */
export function runCli(args: string[], env: Record<string, string | undefined>): Promise<RunResult> {
  return runCollected('npm', ['run', '--silent', 'mas', '--', ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env } as NodeJS.ProcessEnv,
  });
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command to its end and resolves with its exit code and whole output, whatever the code
 * (the tests judge it); rejects only when it cannot start. Waits for 'close', so no output is lost.
 */
export function runCollected(cmd: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export interface ProcessInfo {
  pid: number;
  ppid: number;
  cmd: string;
}

function readProcess(pid: number): (ProcessInfo & { state: string }) | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
    return { pid, ppid: Number(fields[1]), state: fields[0]!, cmd };
  } catch {
    return undefined;
  }
}

/** True while the process exists and is not a zombie (exited, not yet reaped). */
export function isRunning(pid: number): boolean {
  const p = readProcess(pid);
  return p !== undefined && p.state !== 'Z' && p.state !== 'X';
}

/**
 * Every live process (Linux /proc) started for this DATA_DIR: those with DATA_DIR=dataDir in
 * their environment or dataDir on their command line (npm, its shell, node, the PostgreSQL
 * postmaster, the Temporal dev server), and all their descendants (PostgreSQL's backends
 * overwrite their environment with their process titles).
 */
export function processesOfDataDir(dataDir: string): ProcessInfo[] {
  const all: ProcessInfo[] = [];
  const matched = new Set<number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const p = readProcess(Number(name));
    if (!p || p.state === 'Z' || p.state === 'X') continue;
    all.push(p);
    let environ = '';
    try {
      environ = readFileSync(`/proc/${name}/environ`, 'utf8');
    } catch {
      // not ours to read, or gone
    }
    if (p.cmd.includes(dataDir) || environ.split('\0').includes(`DATA_DIR=${dataDir}`)) matched.add(p.pid);
  }
  const byPid = new Map(all.map((p) => [p.pid, p]));
  const related = (p: ProcessInfo): boolean => {
    for (let q: ProcessInfo | undefined = p, hops = 0; q && hops < 64; q = byPid.get(q.ppid), hops++) {
      if (matched.has(q.pid)) return true;
    }
    return false;
  };
  return all.filter(related);
}
