import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SDK_WORKFLOW_THREAD, watchThread } from '../../workflows/workflow-thread.ts';

/**
 * The watch that stands in for the SDK's per-call deadlock watchdog (workflows/workflow-thread.ts):
 * the workflow thread marks [0] while a call into workflow code runs and counts the calls in [1].
 * Fake timers: the test moves the clock, it does not wait.
 */
describe('the workflow thread watch', () => {
  let thread: EventEmitter & { terminate: ReturnType<typeof vi.fn> };
  let watch: Int32Array;
  const logger = pino({ level: 'silent' });

  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
    thread = Object.assign(new EventEmitter(), { terminate: vi.fn(() => Promise.resolve(1)) });
    watch = new Int32Array(new SharedArrayBuffer(8));
    watchThread(thread as unknown as Worker, watch, { limitMs: 10_000, checkEveryMs: 1_000, logger });
  });
  afterEach(() => {
    thread.emit('exit', 0);
    vi.useRealTimers();
  });

  const call = () => {
    Atomics.add(watch, 1, 1);
    Atomics.store(watch, 0, 1);
  };
  const done = () => Atomics.store(watch, 0, 0);

  it('stops the thread when one call runs on past the limit', () => {
    call();
    vi.advanceTimersByTime(10_000);
    expect(thread.terminate).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1_000);
    expect(thread.terminate).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(60_000);
    expect(thread.terminate).toHaveBeenCalledTimes(1);
  });

  it('leaves a busy thread alone while its calls end and new ones start, and an idle one for ever', () => {
    for (let i = 0; i < 40; i++) {
      done();
      call();
      vi.advanceTimersByTime(1_000);
    }
    done();
    vi.advanceTimersByTime(120_000);
    expect(thread.terminate).not.toHaveBeenCalled();
  });

  it('stops watching once the thread has exited', () => {
    thread.emit('exit', 0);
    call();
    vi.advanceTimersByTime(60_000);
    expect(thread.terminate).not.toHaveBeenCalled();
  });
});

describe('the SDK workflow thread that workflows/workflow-thread.ts starts in its own way', () => {
  it('is still the script the SDK starts its workflow thread with (else the redirect would silently not apply)', () => {
    const lib = path.dirname(createRequire(import.meta.url).resolve('@temporalio/worker'));
    const thread = path.join(lib, 'workflow', 'workflow-worker-thread.js');
    expect(thread).toMatch(SDK_WORKFLOW_THREAD);
    expect(readFileSync(path.join(lib, 'workflow', 'threaded-vm.js'), 'utf8')).toContain("new node_worker_threads_1.Worker(require.resolve('./workflow-worker-thread'))");
    // The two costs the entry takes out: the per-call timeout and the promise hook.
    expect(readFileSync(path.join(lib, 'workflow', 'reusable-vm.js'), 'utf8')).toContain('timeout: isolateExecutionTimeoutMs');
    expect(readFileSync(path.join(lib, 'workflow', 'vm-shared.js'), 'utf8')).toContain('promiseHooks.createHook');
  });
});
