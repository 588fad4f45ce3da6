import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { API, npmStartHarness, POSTMASTER, readyz, TEMPORAL, WORKER } from '../support/npm-start.ts';
import { isRunning, ROOT, spawnProject, type Spawned } from '../support/process.ts';

/**
 * The process lifecycle of the real commands, `npm start` and `npm run worker`, with the
 * embedded PostgreSQL and the embedded Temporal dev server (no DATABASE_URL, no
 * TEMPORAL_ADDRESS) in a DATA_DIR of their own: a process manager or container runtime
 * signals npm's PID, not node's, and stopping it must stop everything that DATA_DIR runs.
 * The worker process's part is test/e2e/signals-worker.test.ts (its own DATA_DIR, so that the
 * two files run side by side).
 */
const harness = npmStartHarness();
const { npmStart, find, expectRunning, expectNothingLeft } = harness;

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
    const postmaster = Number((await fs.readFile(path.join(harness.dataDir, 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0]);
    const temporal = (JSON.parse(await fs.readFile(path.join(harness.dataDir, 'temporal', 'server.json'), 'utf8')) as { pid: number }).pid;

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
});

/**
 * The guard both entry points install (config/process-lifecycle.ts), in a small process of its
 * own with a stand-in for the graceful stop: quick, no database.
 */
describe('the process guard', () => {
  async function guarded(action: 'serve' | 'reject' | 'throw'): Promise<Spawned> {
    const script = path.join(harness.folder, 'guarded.ts');
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
    const proc = harness.track(spawnProject(['--import', 'tsx', script, action], {}));
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
