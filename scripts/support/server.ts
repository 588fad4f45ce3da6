import { spawnSync, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../adapters/embedded/postgres.ts';
import { ensureBuilt } from '../build.ts';
import { spawnEntry } from './process.ts';

/**
 * The real server for the scripts that test it from outside (schema-fuzz.ts, mcp-conformance.ts,
 * mcp-auth-conformance.ts):
 * `node dist/main.js` (built first when a source is newer) on a free port with a fresh temporary DATA_DIR, so that the
 * embedded PostgreSQL and Temporal dev server start too and the first start prints the demo key
 * of a funded account; and the means to stop it and everything it started, leaving nothing behind.
 */

/** The clone's root folder. */
export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Where a script's progress lines go (stderr, with the script's name). */
export type Say = (line: string) => void;

export const sayer =
  (name: string): Say =>
  (line) =>
    process.stderr.write(`[${name}] ${line}\n`);

/** A positive integer from the environment, or `fallback`; anything else ends the process (exit 2). */
export function positiveInt(say: Say, name: string, fallback?: number): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) {
    say(`${name} must be a positive integer, not ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return Number(raw);
}

/** Whether any process of the group led by `pgid` is still alive. */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The processes whose command line names `dir`: the embedded PostgreSQL (`-D <dir>/…`) and
 * Temporal dev server (`--db-filename <dir>/…`) of this run. Both leave the server's process
 * group (PostgreSQL daemonizes, Temporal gets a group of its own), so they are found by the
 * temporary folder only this run uses.
 */
export function processesUsing(dir: string): number[] {
  const found: number[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    // No /proc (macOS): ask ps.
    const ps = spawnSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
    for (const line of (ps.stdout ?? '').split('\n')) {
      const m = /^\s*(\d+)\s+(.*)$/.exec(line);
      if (m && m[2]!.includes(dir) && Number(m[1]) !== process.pid) found.push(Number(m[1]));
    }
    return found;
  }
  for (const pid of pids) {
    try {
      if (Number(pid) !== process.pid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(dir)) found.push(Number(pid));
    } catch {
      /* gone, or not ours to read */
    }
  }
  return found;
}

export function signalAll(pids: number[], signal: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      /* gone meanwhile */
    }
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Server {
  /** Undefined for the shared server of scripts/suites.ts, which that script starts and stops. */
  child: ChildProcess | undefined;
  base: string;
  key: string;
  /** The demo account's one-time sign-in link (`<base>/login/link?token=…`, valid 15 minutes): a secret, like the key. */
  loginUrl: string;
  exited: Promise<number | null>;
  hasExited: () => boolean;
}

/**
 * Starts the server in `dataDir` (which must not exist yet or be empty, so that it prints the demo
 * key and sign-in link) with its stderr, and its stdout with the key and link masked, in `logFile`.
 * Resolves once it listens.
 */
export async function startServer(say: Say, work: string, dataDir: string, logFile: string, extraEnv: Record<string, string> = {}): Promise<Server> {
  const shared = process.env.MAS_SHARED_SERVER;
  if (shared) {
    // scripts/suites.ts runs several suites on one server: it started it, it stops it.
    if (Object.keys(extraEnv).length > 0) throw new Error('MAS_SHARED_SERVER: this suite needs a server with settings of its own');
    const s = JSON.parse(await fs.readFile(shared, 'utf8')) as { base: string; key: string; loginUrl: string; logFile: string; pid: number };
    await fs.symlink(s.logFile, logFile).catch(() => undefined);
    say(`on the shared server at ${s.base} (scripts/suites.ts)`);
    const alive = () => {
      try {
        process.kill(s.pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    return { child: undefined, base: s.base, key: s.key, loginUrl: s.loginUrl, exited: new Promise<number | null>(() => undefined), hasExited: () => !alive() };
  }
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env };
  // Everything embedded and local: no external database, Temporal, Redis, bucket or upstream.
  for (const name of ['DATABASE_URL', 'TEMPORAL_ADDRESS', 'REDIS_URL', 'STORAGE_DRIVER', 'METRICS_TOKEN', 'PUBLIC_BASE_URL', 'TRUST_PROXY', 'RUN_WORKER']) delete env[name];
  Object.assign(env, {
    PORT: String(port),
    HOST: '127.0.0.1',
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    DATA_DIR: dataDir,
    LOG_LEVEL: process.env.LOG_LEVEL || 'warn',
    // Enough coins and requests that the tools meet the API's checks, not its limits.
    DEMO_COINS: '100000000',
    RATE_LIMIT_PER_MINUTE: '1000000',
    SHUTDOWN_TIMEOUT_SECONDS: '5',
    ...extraEnv,
  });
  await ensureBuilt();
  // Its own process group, so that everything it starts (PostgreSQL, Temporal) can be found and
  // stopped; the demo key it prints once stays out of the log file.
  const proc = spawnEntry('main', { env, inheritEnv: false, detached: true, logFile, redact: 'log', name: 'the server' });
  const { child, exited } = proc;
  let exitedFlag = false;
  void exited.then(() => (exitedFlag = true));
  const ready = proc.waitFor(/listening on/, 300_000).then(() => {
    const out = proc.output();
    const key = /Bearer (mas_[A-Za-z0-9_-]+)/.exec(out)?.[1];
    const loginUrl = /(http\S+\/login\/link\?token=\S+)/.exec(out)?.[1];
    if (!key || !loginUrl) throw new Error('the server started without printing a demo key (was DATA_DIR not empty?)');
    return { key, loginUrl };
  });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error('the server did not start within 5 minutes')), 300_000);
  });
  const server = { child, base: `http://127.0.0.1:${port}`, key: '', loginUrl: '', exited, hasExited: () => exitedFlag };
  try {
    Object.assign(server, await Promise.race([ready, timeout]));
    return server;
  } catch (err) {
    await stopServer(say, server, work);
    // The log goes with the temporary folder: show its end now.
    const tail = (await fs.readFile(logFile, 'utf8').catch(() => '')).trimEnd().split('\n').slice(-30);
    say(`the server's output, last lines:\n${tail.map((l) => `  ${l.slice(0, 2000)}`).join('\n')}`);
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * SIGTERM, a wait for a clean exit (the server stops its PostgreSQL and Temporal itself), then
 * SIGKILL to whatever is left: the server's process group, and any process still using this
 * run's temporary folder (SIGTERM first: PostgreSQL shuts down cleanly on it).
 */
export async function stopServer(say: Say, server: Server, work: string): Promise<void> {
  if (!server.child) return; // the shared server: its starter stops it
  const pgid = server.child.pid;
  if (pgid !== undefined && !server.hasExited()) {
    server.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), 60_000)));
    if ((await Promise.race([server.exited, timedOut])) === 'timeout') say('the server did not stop within 60 s of SIGTERM; killing it');
    clearTimeout(timer);
  }
  for (let i = 0; i < 50 && pgid !== undefined && groupAlive(pgid); i++) await sleep(100);
  if (pgid !== undefined && groupAlive(pgid)) {
    say('processes of the server were still running after it exited; killing them');
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      /* gone meanwhile */
    }
  }
  let left = processesUsing(work);
  if (left.length === 0) return;
  say(`${left.length} process(es) of this run were still running (${left.join(', ')}); stopping them`);
  signalAll(left, 'SIGTERM');
  for (let i = 0; i < 100 && left.length > 0; i++) {
    await sleep(100);
    left = processesUsing(work);
  }
  signalAll(left, 'SIGKILL');
}

/**
 * Last resort, should the process end in an unexpected way (it normally stops the server
 * first): nothing of this run is left behind. Synchronous, as an 'exit' handler must be.
 */
export function killLeftoversOnExit(work: string, server: () => Server | undefined): void {
  process.on('exit', () => {
    const pid = server()?.child?.pid;
    if (pid !== undefined && groupAlive(pid)) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    signalAll(processesUsing(work), 'SIGKILL');
  });
}

/** The server's error lines (pino level 50 and up), to show what a 5xx was; `redact` masks secrets in them. */
export async function printServerErrors(say: Say, logFile: string, redact: (line: string) => string = (line) => line): Promise<void> {
  const lines = (await fs.readFile(logFile, 'utf8').catch(() => '')).split('\n').filter((l) => /"level":(5|6)\d/.test(l));
  if (lines.length === 0) return;
  say(`the server logged ${lines.length} error line(s); the first ones:`);
  for (const line of lines.slice(0, 20)) process.stderr.write(`${redact(line).slice(0, 4000)}\n`);
}
