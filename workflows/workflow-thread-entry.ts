import { createRequire } from 'node:module';
import v8 from 'node:v8';
import vm from 'node:vm';
import { workerData } from 'node:worker_threads';

/**
 * The entry of the worker's workflow thread (workflows/workflow-thread.ts starts it in place of
 * the Temporal SDK's own `workflow-worker-thread.js`, which it then runs unchanged). Two of the
 * SDK's costs, paid on every workflow activation, are taken out here (bench/RESULTS.md, round 4):
 *
 * 1. The deadlock detector. The SDK runs every call into the workflow sandbox (several per
 *    activation) with `vm`'s `timeout` option, and Node implements that option by starting a
 *    new watchdog thread, with its own event loop, for each call: about 165 µs of CPU per call
 *    on this project's machine, 1 µs without (half of the workflow thread's time on the
 *    generations benchmark). Here the calls run without it, and the thread instead counts them
 *    in `watch` (a shared Int32Array: [0] 1 while a call runs, [1] the calls started), which the
 *    main thread reads once a second: a call that runs on past 10 s (the workflow task timeout; the SDK's limit was 5 s) stops the
 *    thread, which fails the worker as any death of its workflow thread does (the process
 *    exits, and its supervisor starts it again), rather than leaving every job on it stuck.
 * 2. The promise hook behind the `__stack_trace` query (the Temporal UI's Stack Trace tab): a
 *    stack trace captured, formatted and stored for every promise workflow code makes (a
 *    quarter of what was left of the thread's time). The hook is not installed; the query
 *    answers with no stack. Nothing a workflow decides depends on it.
 */
const data = workerData as { sdkThread: string; watch: Int32Array } | null;
if (!data?.sdkThread) throw new TypeError('workflow-thread-entry: started without the SDK thread to run');
const watch = data.watch;

const runInContext = vm.Script.prototype.runInContext;
vm.Script.prototype.runInContext = function (this: vm.Script, context: vm.Context, options?: vm.RunningScriptOptions) {
  Atomics.add(watch, 1, 1);
  Atomics.store(watch, 0, 1);
  try {
    if (options?.timeout === undefined) return runInContext.call(this, context, options);
    const { timeout: _deadlockTimeout, ...rest } = options;
    return runInContext.call(this, context, rest);
  } finally {
    Atomics.store(watch, 0, 0);
  }
};

// The SDK installs its hook once, at the thread's start; it gets a stop function for a hook never made.
v8.promiseHooks.createHook = () => () => undefined;

createRequire(import.meta.url)(data.sdkThread);
