import { fileURLToPath } from 'node:url';
import workerThreads, { type WorkerOptions } from 'node:worker_threads';
import type { Logger } from 'pino';

const INSTALLED = Symbol.for('mas.workflowThreadEntry');
/** The script the SDK (1.24) starts its workflow thread with (`threaded-vm.js`); test/unit/workflow-thread.test.ts checks it still does. */
export const SDK_WORKFLOW_THREAD = /[\\/]@temporalio[\\/]worker[\\/]lib[\\/]workflow[\\/]workflow-worker-thread\.js$/;

/**
 * Starts the Temporal SDK's workflow thread through workflows/workflow-thread-entry.ts, which
 * runs the SDK's own thread script without its per-call deadlock watchdog thread and without the
 * stack-trace promise hook (that file says why and what each cost), and watches it from here in
 * the watchdog's place: a call into workflow code that runs longer than `limitMs` (the SDK's
 * workflow task timeout, 10 s; the SDK's own limit was 5 s) stops the thread, and with it the worker (the SDK fails the
 * worker when its workflow thread dies: the process exits and is started again). The SDK
 * constructs its thread with `new Worker(<its workflow-worker-thread.js>)`; only that
 * construction is redirected, every other Worker is left alone. Installed once per process,
 * before the first Temporal worker is created.
 */
export function installWorkflowThreadEntry(logger: Logger, opts: { limitMs?: number; checkEveryMs?: number } = {}): void {
  const limitMs = opts.limitMs ?? 10_000;
  const checkEveryMs = opts.checkEveryMs ?? 1_000;
  const Original = workerThreads.Worker;
  if (INSTALLED in Original) return;
  const entry = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './workflow-thread-entry.ts' : './workflow-thread-entry.js', import.meta.url));

  class WorkflowThread extends Original {
    static [INSTALLED] = true;
    constructor(filename: string | URL, options?: WorkerOptions) {
      const file = filename instanceof URL ? filename.href : filename;
      if (!SDK_WORKFLOW_THREAD.test(file) || options?.workerData !== undefined) {
        super(filename, options);
        return;
      }
      const watch = new Int32Array(new SharedArrayBuffer(8));
      super(entry, { ...options, workerData: { sdkThread: file, watch } });
      watchThread(this, watch, { limitMs, checkEveryMs, logger });
    }
  }
  (workerThreads as { Worker: typeof workerThreads.Worker }).Worker = WorkflowThread;
}

/** Every `checkEveryMs`: a call into workflow code still running, with no other call started since, for `limitMs` or more stops the thread. */
export function watchThread(thread: workerThreads.Worker, watch: Int32Array, opts: { limitMs: number; checkEveryMs: number; logger: Logger }): void {
  let seen = -1;
  let since = 0;
  const timer = setInterval(() => {
    const busy = Atomics.load(watch, 0) === 1;
    const calls = Atomics.load(watch, 1);
    const now = performance.now();
    if (!busy || calls !== seen) {
      seen = busy ? calls : -1;
      since = now;
      return;
    }
    if (now - since < opts.limitMs) return;
    clearInterval(timer);
    opts.logger.error({ limitMs: opts.limitMs }, 'a workflow activation ran past the limit (a workflow stuck in synchronous code): stopping the workflow thread, which stops this worker');
    void thread.terminate();
  }, opts.checkEveryMs);
  timer.unref();
  thread.once('exit', () => clearInterval(timer));
}
