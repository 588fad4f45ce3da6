import { readdirSync, readFileSync } from 'node:fs';
import { entryArgs, runMas, spawnProcess, type RunResult, type Spawned } from '../../scripts/support/process.ts';

export { ROOT, entryArgs, runCollected, type RunResult, type Spawned } from '../../scripts/support/process.ts';

/**
 * Runs a command of this project (`node dist/main.js`, `npm start`…) as a real process with
 * only `env` (and PATH, HOME) in its environment (scripts/support/process.ts).
 */
export function spawnProject(args: string[], env: Record<string, string | undefined>, command = process.execPath): Spawned {
  return spawnProcess(command, args, { env });
}

/** The server as production runs it: `node dist/main.js` (the global setup built dist/). */
export function serverArgs(): string[] {
  return entryArgs('main');
}

export { freePort } from '../../adapters/embedded/postgres.ts';

/** Runs the operator CLI as production runs it (`node dist/mas.js`) and returns its exit code and streams. */
export function runCli(args: string[], env: Record<string, string | undefined>): Promise<RunResult> {
  return runMas(args, env);
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
