import { realpathSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { isRunning, processesOfDataDir, ROOT, spawnProject, type Spawned } from '../support/process.ts';

/**
 * The process lifecycle of the real commands, `npm start` and `npm run worker`, with the
 * embedded PostgreSQL and the embedded Temporal dev server (no DATABASE_URL, no
 * TEMPORAL_ADDRESS) in a DATA_DIR of their own: a process manager or container runtime
 * signals npm's PID, not node's, and stopping it must stop everything that DATA_DIR runs.
 */
let tmp: string;
let dataDir: string;
const started: Spawned[] = [];

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-signals-'));
  dataDir = path.join(tmp, 'data');
});
afterEach(async () => {
  // Whatever a failed test left running: end it, PostgreSQL with its own fast shutdown.
  for (const p of started.splice(0)) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  const left = processesOfDataDir(dataDir);
  for (const p of left) {
    try {
      process.kill(p.pid, /postgres -D/.test(p.cmd) ? 'SIGINT' : 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  if (left.length > 0) await vi.waitFor(() => expect(processesOfDataDir(dataDir)).toEqual([]), { timeout: 30_000, interval: 250 });
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

const env = (extra: Record<string, string> = {}) => ({ DATA_DIR: dataDir, HOST: '127.0.0.1', ...extra });

async function npmStart(): Promise<{ npm: Spawned; port: number }> {
  // Port 0, the one it got read from its log: a port picked beforehand may be taken meanwhile
  // (the Temporal dev server picks two more as it starts).
  const npm = spawnProject(['start'], env({ PORT: '0' }), 'npm');
  started.push(npm);
  const [, port] = await npm.waitFor(/"port":(\d+).*"msg":"listening"/, 240_000);
  await npm.waitFor(/listening on/);
  return { npm, port: Number(port) };
}

async function npmRunWorker(): Promise<Spawned> {
  const npm = spawnProject(['run', 'worker'], env(), 'npm');
  started.push(npm);
  await npm.waitFor(/Temporal worker running/, 120_000);
  return npm;
}

const find = (pattern: RegExp) => processesOfDataDir(dataDir).filter((p) => pattern.test(p.cmd));
// `npm start` runs the built JavaScript (dist/main.js, no transpiler), which runs its worker as a child (dist/worker.js).
const API = /^(\S*\/)?node (\S*\/)?dist\/main\.js/;
const WORKER = /^(\S*\/)?node (\S*\/)?dist\/worker\.js/;
const POSTMASTER = /postgres -D /;
const TEMPORAL = /temporal server start-dev/;

// The Node.js npm ci installed from the lockfile (node_modules/.bin/node): what npm start's processes must run.
const PINNED_NODE = realpathSync(path.join(ROOT, 'node_modules', '.bin', 'node'));
const executable = (pid: number) => realpathSync(`/proc/${pid}/exe`);

/** The API process, its worker process, PostgreSQL and the Temporal dev server of this DATA_DIR run; both Node processes on the pinned Node.js. */
function expectRunning(): void {
  expect(find(API)).toHaveLength(1);
  expect(find(WORKER)).toHaveLength(1);
  expect([...find(API), ...find(WORKER)].map((p) => executable(p.pid))).toEqual([PINNED_NODE, PINNED_NODE]);
  expect(find(POSTMASTER)).toHaveLength(1);
  expect(find(TEMPORAL)).toHaveLength(1);
}

async function expectNothingLeft(timeoutMs = 60_000): Promise<void> {
  await vi.waitFor(() => expect(processesOfDataDir(dataDir).map((p) => p.cmd)).toEqual([]), { timeout: timeoutMs, interval: 250 });
}

async function readyz(port: number): Promise<number | 'refused'> {
  return fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status, () => 'refused' as const);
}

describe.runIf(process.platform === 'linux')('stopping `npm start`', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} to the npm PID stops the API process, PostgreSQL and the Temporal dev server`, async () => {
      const { npm, port } = await npmStart();
      expectRunning();
      expect(await readyz(port)).toBe(200);

      npm.child.kill(signal);
      await expectNothingLeft();
      expect(await readyz(port)).toBe('refused');
      // The graceful stop ran: the service and both embedded servers said so.
      expect(npm.output()).toContain('"msg":"stopped"');
      expect(npm.output()).toContain('stopped embedded PostgreSQL');
      expect(npm.output()).toContain('stopped embedded Temporal dev server');
    }, 300_000);
  }

  it('after the API process is killed (SIGKILL), the next start adopts PostgreSQL and the Temporal dev server, and its clean stop stops them', async () => {
    const first = await npmStart();
    expectRunning();
    const [api] = find(API);
    const postmaster = Number((await fs.readFile(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0]);
    const temporal = (JSON.parse(await fs.readFile(path.join(dataDir, 'temporal', 'server.json'), 'utf8')) as { pid: number }).pid;

    process.kill(api!.pid, 'SIGKILL');
    await first.npm.exited;
    await vi.waitFor(() => expect(find(API)).toEqual([]), { timeout: 10_000 });
    // Its worker process saw it go (the IPC channel closed) and stopped too.
    await vi.waitFor(() => expect(find(WORKER)).toEqual([]), { timeout: 60_000, interval: 250 });
    // Left running by the crash, for the next start to adopt.
    expect(isRunning(postmaster)).toBe(true);
    expect(isRunning(temporal)).toBe(true);

    const second = await npmStart();
    expect(second.npm.output()).toContain('attached to the running embedded PostgreSQL');
    expect(second.npm.output()).toContain('attached to the running embedded Temporal dev server');
    expect(find(POSTMASTER).map((p) => p.pid)).toEqual([postmaster]);
    expect(find(TEMPORAL).map((p) => p.pid)).toEqual([temporal]);
    expect(await readyz(second.port)).toBe(200);

    second.npm.child.kill('SIGTERM');
    await expectNothingLeft();
    expect(second.npm.output()).toContain('stopped embedded Temporal dev server');
  }, 400_000);

  it('a worker process that dies is started again, and the clean stop stops the new one', async () => {
    const { npm, port } = await npmStart();
    await npm.waitFor(/worker running/, 120_000);
    const [first] = find(WORKER);
    process.kill(first!.pid, 'SIGKILL');
    await vi.waitFor(() => expect(find(WORKER).map((p) => p.pid).filter((pid) => pid !== first!.pid)).toHaveLength(1), { timeout: 30_000, interval: 250 });
    expect(npm.output()).toContain('the worker process exited: starting it again');
    expect(await readyz(port)).toBe(200);

    npm.child.kill('SIGTERM');
    await expectNothingLeft();
  }, 300_000);

  it('`npm run worker` shares the servers: they outlive the API while the worker runs, and the last one out stops them', async () => {
    const api = await npmStart();
    const worker = await npmRunWorker();
    expect(worker.output()).toContain('attached to the running embedded Temporal dev server');
    // npm start's own worker process and this one.
    expect(find(WORKER)).toHaveLength(2);

    api.npm.child.kill('SIGTERM');
    await vi.waitFor(() => expect(find(API)).toEqual([]), { timeout: 60_000, interval: 250 });
    expect(api.npm.output()).toContain('leaving the embedded Temporal dev server running for the other processes using it');
    expect(find(POSTMASTER)).toHaveLength(1);
    expect(find(TEMPORAL)).toHaveLength(1);
    expect(find(WORKER)).toHaveLength(1);

    worker.child.kill('SIGINT');
    await expectNothingLeft();
    expect(worker.output()).toContain('worker stopped');
    expect(worker.output()).toContain('stopped embedded Temporal dev server');
  }, 400_000);
});

/**
 * The guard both entry points install (config/process-lifecycle.ts), in a small process of its
 * own with a stand-in for the graceful stop: quick, no database.
 */
describe('the process guard', () => {
  async function guarded(action: 'serve' | 'reject' | 'throw'): Promise<Spawned> {
    const script = path.join(tmp, 'guarded.ts');
    await fs.writeFile(script, `
      import { createLogger } from ${JSON.stringify(path.join(ROOT, 'config/logger.ts'))};
      import { manageProcessLifecycle } from ${JSON.stringify(path.join(ROOT, 'config/process-lifecycle.ts'))};
      const logger = createLogger('info');
      const lifecycle = manageProcessLifecycle(logger);
      lifecycle.setStop(async () => {
        await new Promise((r) => setTimeout(r, 200));
        process.stdout.write('graceful stop done\\n');
      });
      setInterval(() => undefined, 1000); // serving
      process.stdout.write('ready\\n');
      if (process.argv[2] === 'reject') {
        setTimeout(() => {
          void Promise.reject(new Error('nobody caught this'));
          setTimeout(() => process.stdout.write('still serving\\n'), 300);
        }, 100);
      }
      if (process.argv[2] === 'throw') setTimeout(() => { throw new Error('boom'); }, 100);
    `);
    const proc = spawnProject(['--import', 'tsx', script, action], {});
    started.push(proc);
    const ready = await proc.waitFor(/ready/).then(() => true, () => false);
    // Its output without stack frames: vitest would try to source-map those of the child.
    expect(ready, proc.output().split('\n').filter((l) => !/^\s+at /.test(l)).join('\n')).toBe(true);
    return proc;
  }

  it('an unhandled rejection is logged and the process keeps serving', async () => {
    const proc = await guarded('reject');
    await proc.waitFor(/still serving/);
    expect(proc.output()).toMatch(/"level":50,.*"err":\{.*"message":"nobody caught this".*"msg":"unhandled promise rejection \(still serving\)"/);
    proc.child.kill('SIGTERM');
    expect(await proc.exited).toBe(0);
    expect(proc.output()).toContain('graceful stop done');
  });

  it('an uncaught exception is logged as fatal, then the graceful stop runs and the process exits with 1', async () => {
    const proc = await guarded('throw');
    expect(await proc.exited).toBe(1);
    expect(proc.output()).toMatch(/"level":60,.*"err":\{.*"message":"boom".*"msg":"uncaught exception: stopping"/);
    expect(proc.output()).toContain('graceful stop done');
  });

  it('SIGHUP (a closed terminal) is a graceful stop too', async () => {
    const proc = await guarded('serve');
    proc.child.kill('SIGHUP');
    expect(await proc.exited).toBe(0);
    expect(proc.output()).toContain('graceful stop done');
  });
});
