import { describe, expect, it, vi } from 'vitest';
import { npmStartHarness, POSTMASTER, readyz, TEMPORAL, WORKER, API } from '../support/npm-start.ts';

/**
 * The worker process of `npm start`, and `npm run worker` beside it, with the embedded servers in
 * a DATA_DIR of their own (test/support/npm-start.ts); the signals to `npm start` are
 * test/e2e/signals.test.ts.
 */
const { npmStart, npmRunWorker, find, expectNothingLeft } = npmStartHarness();

describe.runIf(process.platform === 'linux')('the worker process', () => {
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
