import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { NODE_FLAGS } from './node-flags.ts';

/**
 * `npm start`'s Temporal worker, run as a process of its own (worker.ts, the same program as
 * `npm run worker`): its workflow code, V8 isolates and the SDK's native core take their
 * memory apart from the API's, and a worker that dies does not take the API with it.
 *
 * The child gets the servers this process opened (the embedded PostgreSQL and Temporal dev
 * server, or the external ones) through DATABASE_URL and TEMPORAL_ADDRESS, and an IPC channel
 * whose closing tells it that this process is gone, even killed with SIGKILL
 * (config/process-lifecycle.ts): it then stops too. It runs in a process group of its own, so
 * that a terminal's Ctrl-C reaches this process only, which then stops the worker with one
 * SIGTERM (a second signal would make the worker exit at once). A worker that exits on its own
 * is logged and started again, after 1 s, doubling up to 30 s while it keeps failing within a
 * minute of its start.
 */
export interface WorkerProcess {
  /** SIGTERM, then waits for the worker to finish its activities in flight and exit. */
  stop(): Promise<void>;
}

/** How the worker entry point is run: the built JavaScript beside this file, or the TypeScript sources through tsx. */
export function workerCommand(): string[] {
  const fromSources = import.meta.url.endsWith('.ts');
  const entry = fileURLToPath(new URL(fromSources ? '../worker.ts' : '../worker.js', import.meta.url));
  return fromSources ? ['--import', 'tsx', entry] : [entry];
}

export function startWorkerProcess(opts: { env: Record<string, string>; logger: Logger; restartDelayMs?: number }): WorkerProcess {
  const firstDelayMs = opts.restartDelayMs ?? 1000;
  // Two glibc malloc arenas rather than up to 8 per core: the worker's threads (the workflow
  // thread, the Temporal core's) each grew an arena of their own; 11 MiB less idle RSS
  // (bench/RESULTS.md, round 4). A value set in the environment wins.
  const env: NodeJS.ProcessEnv = { MALLOC_ARENA_MAX: '2', ...process.env, ...opts.env };
  // The child is ours, not npm's: it watches the IPC channel, not npm's chain of processes.
  delete env.npm_lifecycle_event;
  let child: ChildProcess | undefined;
  let stopping = false;
  let restart: NodeJS.Timeout | undefined;
  // Exits in a row, each within a minute of its start.
  let failures = 0;

  const run = () => {
    const startedAt = Date.now();
    const started = spawn(process.execPath, [...NODE_FLAGS, ...workerCommand()], { env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'], detached: true });
    child = started;
    started.once('exit', (code, signal) => {
      child = undefined;
      if (stopping) return;
      failures = Date.now() - startedAt > 60_000 ? 1 : failures + 1;
      const delayMs = Math.min(firstDelayMs * 2 ** (failures - 1), 30_000);
      opts.logger.error({ code, signal, restartInMs: delayMs }, 'the worker process exited: starting it again');
      restart = setTimeout(run, delayMs);
    });
    started.on('error', (err) => opts.logger.error({ err }, 'could not start the worker process'));
  };
  run();

  return {
    async stop() {
      stopping = true;
      clearTimeout(restart);
      const running = child;
      if (!running || running.exitCode !== null || running.signalCode !== null) return;
      const exited = new Promise((resolve) => running.once('exit', resolve));
      running.kill('SIGTERM');
      await exited;
    },
  };
}
