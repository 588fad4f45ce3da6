import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import type { Logger } from 'pino';
import { freePort } from './postgres.ts';
import { ensureTemporalCli } from './temporal-cli.ts';

/**
 * A Temporal dev server (`temporal server start-dev`) for machines with no TEMPORAL_ADDRESS,
 * its state in DATA_DIR/temporal. Every process of this service on the same DATA_DIR (the
 * API, a separate `npm run worker`, a test run) shares one server, as with the embedded
 * PostgreSQL:
 *   - server.json names the running server (pid, its start time, ports);
 *   - users/ holds one file per process using it;
 *   - lock is held while a process starts the server, attaches to it or leaves it.
 * The last live user to leave stops it, whichever process started it. A user killed outright
 * (SIGKILL) leaves its file behind, but its pid is dead so it no longer counts; if it was the
 * only user, the server runs on until the next process on this DATA_DIR attaches to it
 * (adopts it) and, leaving last, stops it.
 * The server runs in a session of its own: a Ctrl-C at the terminal reaches the processes
 * using it, which finish their work and then stop it, not the server itself first.
 */
export interface EmbeddedTemporal {
  address: string;
  uiUrl: string;
  startedHere: boolean;
  /** Leaves the server; stops it when no other live process uses it. */
  release(): Promise<void>;
}

interface Identity {
  pid: number;
  /** Linux: the process's start time (/proc/<pid>/stat), so a reused pid is not mistaken for it. */
  startTime?: string;
}

interface ServerState extends Identity {
  port: number;
  uiPort: number;
}

export async function startEmbeddedTemporal(opts: { dataDir: string; logger: Logger; namespace?: string; searchAttributes?: string[] }): Promise<EmbeddedTemporal> {
  const { logger } = opts;
  const namespace = opts.namespace ?? 'default';
  const dir = path.join(path.resolve(opts.dataDir), 'temporal');
  const usersDir = path.join(dir, 'users');
  await fs.mkdir(usersDir, { recursive: true });
  const stateFile = path.join(dir, 'server.json');

  // Installing the CLI can take minutes the first time: not while holding the lock.
  const peek = await readJson<ServerState>(stateFile);
  const preinstalled = peek && isAlive(peek) ? undefined : await ensureTemporalCli(logger);

  return withLock(dir, async () => {
    const me = path.join(usersDir, `${process.pid}-${randomBytes(4).toString('hex')}.json`);
    const register = () => fs.writeFile(me, JSON.stringify(identity(process.pid)));

    const running = await readRunning(stateFile, namespace, logger);
    if (running) {
      await register();
      logger.info({ address: `127.0.0.1:${running.port}`, pid: running.pid }, 'attached to the running embedded Temporal dev server');
      return handle(running, false);
    }

    const cli = preinstalled ?? (await ensureTemporalCli(logger));
    const port = await freePort();
    const uiPort = await freePort();
    const log = openSync(path.join(dir, 'server.log'), 'a');
    let child: ChildProcess;
    try {
      child = spawn(
        cli,
        ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(port), '--ui-port', String(uiPort),
          '--db-filename', path.join(dir, 'temporal.db'), '--namespace', namespace, '--log-level', 'warn',
          // Write-ahead log: same durability (each commit still synced), far fewer syncs than the
          // rollback journal; measured 18 → 28 jobs/s on the generations benchmark.
          '--sqlite-pragma', 'journal_mode=wal',
          // In WAL mode, NORMAL syncs at checkpoints rather than at every commit: a commit
          // survives the dev server or this machine's processes being killed (the tests kill
          // them), not a power cut (SQLite's documented trade-off). The embedded server is the
          // one-machine default; a cluster keeps its own database's durability.
          '--sqlite-pragma', 'synchronous=normal',
          // The job workflows' search attributes (workflows/shared.ts), registered on the namespace.
          ...(opts.searchAttributes ?? []).flatMap((name) => ['--search-attribute', `${name}=Keyword`])],
        // Its own session (no terminal signals), and this process may exit before it.
        { stdio: ['ignore', log, log], detached: true },
      );
    } finally {
      closeSync(log);
    }
    child.unref();
    // A spawn that fails (a missing or unrunnable binary) emits 'error', maybe with no 'exit': both end the wait.
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.on('error', (err) => {
        logger.error({ err }, 'the embedded Temporal dev server could not be run');
        resolve();
      });
    });
    try {
      await waitReady(`127.0.0.1:${port}`, namespace, exited);
    } catch (err) {
      child.kill('SIGKILL');
      throw new Error(`the embedded Temporal dev server did not start: ${(err as Error).message}. See ${path.join(dir, 'server.log')}`);
    }
    const state: ServerState = { ...identity(child.pid!), port, uiPort };
    await writeJson(stateFile, state);
    await register();
    logger.info({ address: `127.0.0.1:${port}`, ui: `http://127.0.0.1:${uiPort}`, pid: state.pid }, 'started embedded Temporal dev server');
    return handle(state, true);

    function handle(server: ServerState, startedHere: boolean): EmbeddedTemporal {
      let released: Promise<void> | undefined;
      return {
        address: `127.0.0.1:${server.port}`,
        uiUrl: `http://127.0.0.1:${server.uiPort}`,
        startedHere,
        release: () =>
          (released ??= withLock(dir, async () => {
            await fs.rm(me, { force: true });
            const others = await liveUsers(usersDir);
            if (others > 0) {
              logger.info({ others }, 'leaving the embedded Temporal dev server running for the other processes using it');
              return;
            }
            const current = await readJson<ServerState>(stateFile);
            if (current && isAlive(current)) {
              await stopProcess(current);
              logger.info({ pid: current.pid, startedHere: startedHere && current.pid === server.pid }, 'stopped embedded Temporal dev server');
            }
            await fs.rm(stateFile, { force: true });
          })),
      };
    }
  });
}

/** The server server.json names, if it is alive and answers; a stuck one of ours is stopped. */
async function readRunning(stateFile: string, namespace: string, logger: Logger): Promise<ServerState | undefined> {
  const state = await readJson<ServerState>(stateFile);
  if (!state) return undefined;
  if (!isAlive(state)) {
    await fs.rm(stateFile, { force: true });
    return undefined;
  }
  try {
    // A live server answers at once; a few seconds of patience for a busy machine.
    await waitReady(`127.0.0.1:${state.port}`, namespace, undefined, 20);
    return state;
  } catch (err) {
    if (state.startTime !== undefined) {
      logger.warn({ pid: state.pid, err }, 'the embedded Temporal dev server runs but does not answer: stopping it to start a new one');
      await stopProcess(state);
    }
    await fs.rm(stateFile, { force: true });
    return undefined;
  }
}

/** Ready means the frontend answers and the namespace exists. */
async function waitReady(address: string, namespace: string, exited: Promise<void> | undefined, attempts = 120): Promise<void> {
  let gone = false;
  void exited?.then(() => (gone = true));
  let lastError: unknown;
  for (let i = 0; i < attempts; i++) {
    if (gone) throw new Error('the process exited');
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } finally {
        await connection.close();
      }
    } catch (err) {
      lastError = err;
      await sleep(250);
    }
  }
  throw new Error(`not ready: ${(lastError as Error)?.message ?? 'timed out'}`);
}

async function liveUsers(usersDir: string): Promise<number> {
  let live = 0;
  for (const name of await fs.readdir(usersDir).catch(() => [] as string[])) {
    const file = path.join(usersDir, name);
    const user = await readJson<Identity>(file);
    if (user && isAlive(user)) live++;
    else if (user) await fs.rm(file, { force: true }); // killed without leaving
  }
  return live;
}

/** SIGTERM (the dev server's graceful stop), SIGKILL after 10 s. */
async function stopProcess(target: Identity): Promise<void> {
  const signal = (name: NodeJS.Signals) => {
    try {
      process.kill(target.pid, name);
    } catch {
      // already gone
    }
  };
  signal('SIGTERM');
  if (await waitGone(target, 10_000)) return;
  signal('SIGKILL');
  await waitGone(target, 5_000);
}

async function waitGone(target: Identity, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100)) {
    if (!isAlive(target)) return true;
  }
  return !isAlive(target);
}

/**
 * Held while starting, attaching to or leaving the server, so that a process leaving last never
 * stops it under one attaching at that moment. A lock whose holder died is taken over.
 */
async function withLock<T>(dir: string, fn: () => Promise<T>, timeoutMs = 300_000): Promise<T> {
  const file = path.join(dir, 'lock');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await fs.writeFile(file, JSON.stringify(identity(process.pid)), { flag: 'wx' });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const seen = await fs.readFile(file, 'utf8').catch(() => undefined);
      if (seen === undefined) continue; // released meanwhile
      const holder = parseJson<Identity>(seen);
      const stale = holder ? !isAlive(holder) : await olderThan(file, 5_000); // empty: being written, or its writer died
      // Its holder died holding it. Take it over, unless another process did first (then the
      // file holds that one's identity now).
      if (stale && (await fs.readFile(file, 'utf8').catch(() => undefined)) === seen) {
        await fs.rm(file, { force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${file} (held by pid ${holder?.pid ?? '?'})`);
      await sleep(100);
    }
  }
  try {
    return await fn();
  } finally {
    await fs.rm(file, { force: true });
  }
}

const HAS_PROC = existsSync('/proc/self/stat');

function procStat(pid: number): { state: string; startTime: string } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // pid (comm) state ppid … starttime (field 22); comm may hold spaces and parentheses.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0]!, startTime: fields[19]! };
  } catch {
    return undefined;
  }
}

function identity(pid: number): Identity {
  return { pid, startTime: procStat(pid)?.startTime };
}

/** Alive: not exited (a zombie waiting to be reaped counts as gone) and not a reused pid. */
function isAlive(id: Identity): boolean {
  if (!Number.isInteger(id.pid) || id.pid <= 0) return false;
  if (HAS_PROC) {
    const stat = procStat(id.pid);
    return stat !== undefined && stat.state !== 'Z' && stat.state !== 'X' && (id.startTime === undefined || stat.startTime === id.startTime);
  }
  try {
    process.kill(id.pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readJson<T>(file: string): Promise<T | undefined> {
  return parseJson<T>(await fs.readFile(file, 'utf8').catch(() => ''));
}

function parseJson<T>(text: string): T | undefined {
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}

async function writeJson(file: string, value: unknown): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await fs.writeFile(tmp, JSON.stringify(value));
  await fs.rename(tmp, file);
}

async function olderThan(file: string, ms: number): Promise<boolean> {
  try {
    return Date.now() - (await fs.stat(file)).mtimeMs > ms;
  } catch {
    return false;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
