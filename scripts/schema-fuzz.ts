import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, readdirSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * `npm run test:schema`: fuzzes the running service against its own OpenAPI document with
 * schemathesis, every check on, POST /files included.
 *
 * 1. schemathesis (pinned) lives in a Python venv outside the clone, made on first use:
 *    ~/.cache/mas/schemathesis-<version> (SCHEMATHESIS_VENV to put it elsewhere).
 * 2. The real server (`node --import tsx main.ts`) starts on a free port with a fresh
 *    temporary DATA_DIR, so the embedded PostgreSQL and Temporal dev server start too and the
 *    first start prints the demo key of a funded account, which the fuzzer then uses.
 * 3. `schemathesis run <base>/api/v1/openapi.json --checks all --max-examples N`.
 * 4. SIGTERM to the server and a wait for it (and everything it started) to exit; whatever is
 *    left of its process group after that is killed. The exit code is schemathesis's: non-zero
 *    when it found a failure (or the server died under it).
 *
 * Settings (environment): SCHEMA_MAX_EXAMPLES (default 50: cases per operation and phase),
 * SCHEMA_MAX_TIME (seconds, a time budget for the whole run), SCHEMA_SEED, SCHEMA_WORKERS
 * (default 1), SCHEMA_PHASES (e.g. "examples,coverage,fuzzing"), SCHEMA_REPORT_DIR (junit and
 * HAR reports there), SCHEMA_EXTRA_ARGS (more schemathesis options, split on spaces),
 * SCHEMA_CONFIG (another schemathesis.toml than scripts/schemathesis.toml), SCHEMA_KEEP_DATA=1
 * (keep the temporary DATA_DIR and the server log).
 */
const SCHEMATHESIS_VERSION = '4.32.5';
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const venv = process.env.SCHEMATHESIS_VENV || path.join(os.homedir(), '.cache', 'mas', `schemathesis-${SCHEMATHESIS_VERSION}`);
const say = (line: string) => process.stderr.write(`[schema-fuzz] ${line}\n`);

function positiveInt(name: string, fallback?: number): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) {
    say(`${name} must be a positive integer, not ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return Number(raw);
}

/**
 * The venv's schemathesis, installed from PyPI on first use. A venv cannot be moved (its scripts
 * name their interpreter by absolute path), so it is built in place and marked complete only
 * once pip has succeeded; an unmarked one (an interrupted install) is built again.
 */
async function ensureSchemathesis(): Promise<string> {
  const bin = path.join(venv, 'bin', 'schemathesis');
  const marker = path.join(venv, '.mas-complete');
  if (existsSync(marker) && spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout?.includes(SCHEMATHESIS_VERSION)) return bin;
  say(`installing schemathesis ${SCHEMATHESIS_VERSION} into ${venv} (first time only)`);
  await fs.rm(venv, { recursive: true, force: true });
  await fs.mkdir(path.dirname(venv), { recursive: true });
  const python = process.env.PYTHON || 'python3';
  const steps: [string, string[]][] = [
    [python, ['-m', 'venv', venv]],
    [path.join(venv, 'bin', 'python'), ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', `schemathesis==${SCHEMATHESIS_VERSION}`]],
  ];
  for (const [cmd, args] of steps) {
    const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    if (r.status !== 0) {
      await fs.rm(venv, { recursive: true, force: true });
      throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status}`})`);
    }
  }
  await fs.writeFile(marker, `${SCHEMATHESIS_VERSION}\n`);
  return bin;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Whether any process of the group led by `pgid` is still alive. */
function groupAlive(pgid: number): boolean {
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
function processesUsing(dir: string): number[] {
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

function signalAll(pids: number[], signal: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
    } catch {
      /* gone meanwhile */
    }
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Server {
  child: ChildProcess;
  base: string;
  key: string;
  exited: Promise<number | null>;
  hasExited: () => boolean;
}

async function startServer(work: string, dataDir: string, logFile: string): Promise<Server> {
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
    // Enough coins and requests that the fuzzer meets the API's checks, not its limits.
    DEMO_COINS: '100000000',
    RATE_LIMIT_PER_MINUTE: '1000000',
    SHUTDOWN_TIMEOUT_SECONDS: '5',
  });
  // Its own process group, so that everything it starts (PostgreSQL, Temporal) can be found and stopped.
  const child = spawn(process.execPath, ['--import', 'tsx', 'main.ts'], { cwd: root, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let exitedFlag = false;
  const exited = new Promise<number | null>((resolve) => {
    child.on('error', (err) => {
      say(`the server could not be started: ${err.message}`);
      exitedFlag = true;
      resolve(null);
    });
    child.on('exit', (code) => {
      exitedFlag = true;
      resolve(code);
    });
  });
  const log = createWriteStream(logFile);
  log.on('error', () => undefined);
  child.stderr!.on('data', (c: Buffer) => log.write(c));
  child.stdout!.on('error', () => undefined);
  child.stderr!.on('error', () => undefined);

  const ready = new Promise<{ key: string }>((resolve, reject) => {
    let out = '';
    let key: string | undefined;
    child.stdout!.on('data', (c: Buffer) => {
      const text = c.toString();
      out += text;
      // The demo key is printed once, outside the logs: keep it out of the log file too.
      log.write(text.replace(/mas_[A-Za-z0-9_-]+/g, 'mas_…'));
      key ??= /Bearer (mas_[A-Za-z0-9_-]+)/.exec(out)?.[1];
      if (/listening on/.test(out)) {
        if (key) resolve({ key });
        else reject(new Error('the server started without printing a demo key (was DATA_DIR not empty?)'));
      }
    });
    void exited.then((code) => reject(new Error(`the server exited (code ${code}) before listening`)));
  });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error('the server did not start within 5 minutes')), 300_000);
  });
  const server = { child, base: `http://127.0.0.1:${port}`, key: '', exited, hasExited: () => exitedFlag };
  try {
    server.key = (await Promise.race([ready, timeout])).key;
    return server;
  } catch (err) {
    await stopServer(server, work);
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
async function stopServer(server: Server, work: string): Promise<void> {
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

/** The server's error lines (pino level 50 and up), to show what a 5xx was. */
async function printServerErrors(logFile: string): Promise<void> {
  const lines = (await fs.readFile(logFile, 'utf8').catch(() => '')).split('\n').filter((l) => /"level":(5|6)\d/.test(l));
  if (lines.length === 0) return;
  say(`the server logged ${lines.length} error line(s); the first ones:`);
  for (const line of lines.slice(0, 20)) process.stderr.write(`${line.slice(0, 4000)}\n`);
}

async function main(): Promise<number> {
  const maxExamples = positiveInt('SCHEMA_MAX_EXAMPLES', 50)!;
  const maxTime = positiveInt('SCHEMA_MAX_TIME');
  const seed = positiveInt('SCHEMA_SEED');
  // One worker: with several, Python 3.11 (before 3.11.9) can fail inside hypothesis with "AST constructor
  // recursion depth mismatch" (CPython gh-106905, ast.parse from concurrent threads).
  const workers = positiveInt('SCHEMA_WORKERS', 1)!;
  const schemathesis = await ensureSchemathesis();

  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-schema-fuzz-'));
  const dataDir = path.join(work, 'data');
  const logFile = path.join(work, 'server.log');
  let server: Server | undefined;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    say(`${signal}: stopping`);
    fuzz?.kill('SIGTERM');
  };
  let fuzz: ChildProcess | undefined;
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // Last resort, should this process end in an unexpected way (it normally stops the server
  // first): nothing of this run is left behind. Synchronous, as an 'exit' handler must be.
  process.on('exit', () => {
    if (server?.child.pid !== undefined && groupAlive(server.child.pid)) {
      try {
        process.kill(-server.child.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    signalAll(processesUsing(work), 'SIGKILL');
  });

  try {
    say(`starting the server (DATA_DIR ${dataDir})`);
    server = await startServer(work, dataDir, logFile);
    if (interrupted) return 130;
    say(`server up at ${server.base}; fuzzing with up to ${maxExamples} examples per operation`);
    const args = [
      '--config-file',
      process.env.SCHEMA_CONFIG ?? path.join(root, 'scripts', 'schemathesis.toml'),
      'run',
      `${server.base}/api/v1/openapi.json`,
      '--url', `${server.base}/api/v1`,
      '--header', `Authorization: Bearer ${server.key}`,
      '--checks', 'all',
      '--max-examples', String(maxExamples),
      '--workers', String(workers),
      '--generation-database', 'none',
      '--no-color',
      ...(maxTime ? ['--max-time', String(maxTime)] : []),
      ...(seed ? ['--seed', String(seed)] : []),
      ...(process.env.SCHEMA_PHASES ? ['--phases', process.env.SCHEMA_PHASES] : []),
      ...(process.env.SCHEMA_REPORT_DIR ? ['--report', 'junit,har', '--report-dir', path.resolve(process.env.SCHEMA_REPORT_DIR)] : []),
      // Anything else for schemathesis, e.g. "--include-path /files" to fuzz one operation.
      ...(process.env.SCHEMA_EXTRA_ARGS ?? '').split(/\s+/).filter(Boolean),
    ];
    // Run from the temporary folder: schemathesis and hypothesis write nothing into the clone.
    fuzz = spawn(schemathesis, args, { cwd: work, stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, PYTHONUNBUFFERED: '1' } });
    const code = await new Promise<number>((resolve) => {
      fuzz!.on('error', (err) => {
        say(`schemathesis could not run: ${err.message}`);
        resolve(1);
      });
      fuzz!.on('exit', (c, signal) => resolve(c ?? (signal ? 128 : 1)));
    });
    if (server.hasExited()) {
      say('the server died during the run');
      await printServerErrors(logFile);
      return 1;
    }
    if (code !== 0) await printServerErrors(logFile);
    say(code === 0 ? 'schemathesis found no failure' : `schemathesis exited with ${code}`);
    return interrupted ? 130 : code;
  } finally {
    if (server) {
      say('stopping the server');
      await stopServer(server, work);
    }
    if (process.env.SCHEMA_KEEP_DATA === '1') say(`kept ${work}`);
    else await fs.rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    say(`failed: ${(err as Error).message}`);
    process.exit(1);
  },
);
