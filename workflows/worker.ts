import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { IllegalStateError } from '@temporalio/common';
import { NativeConnection, Runtime, Worker, type LogLevel, type LogMetadata, type Logger as TemporalLogger } from '@temporalio/worker';
import pino, { type Logger } from 'pino';
import type { CoreDeps } from '../core/context.ts';
import { createActivities } from './activities.ts';
import { TASK_QUEUE } from './shared.ts';
import { activityInterceptors, workerSinks, WORKFLOW_INTERCEPTOR_MODULE, type WorkerTracing } from './tracing.ts';
import { installWorkflowThreadEntry } from './workflow-thread.ts';

/**
 * The workflow code: the bundle `npm run build` made (dist/workflows/bundle.js, beside this
 * file when it runs from dist/), or else the sources, bundled by webpack at start (tests, tsx).
 */
function workflowCode(prebuilt?: string): { workflowBundle: { codePath: string } } | { workflowsPath: string; interceptors: { workflowModules: string[] } } {
  if (prebuilt) return { workflowBundle: { codePath: prebuilt } };
  const bundle = fileURLToPath(new URL('./bundle.js', import.meta.url));
  if (existsSync(bundle)) return { workflowBundle: { codePath: bundle } };
  return {
    workflowsPath: fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './index.ts' : './index.js', import.meta.url)),
    // The bundle `npm run build` makes has the same (scripts/build.ts).
    interceptors: { workflowModules: [WORKFLOW_INTERCEPTOR_MODULE] },
  };
}

export interface RunningWorker {
  /** Resolves when the worker has stopped. */
  done: Promise<void>;
  shutdown(): Promise<void>;
}

const LEVELS: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' };

/**
 * The Temporal SDK's logger interface over the service's logger: each SDK line (the worker's
 * own, workflows' and activities' `log`, and the Rust core's, forwarded) becomes one JSON line
 * with its level, its message and the SDK's fields (`sdkComponent`, `taskQueue`,
 * `workflowId`…). An error, such as a failed workflow's, goes in `err` with its stack: a
 * multi-line stack trace stays inside its one line.
 */
export function temporalLogger(logger: Logger): TemporalLogger {
  const log = (level: LogLevel, message: string, meta?: LogMetadata) => {
    const to = LEVELS[level] ?? 'info';
    if (logger.isLevelEnabled(to)) logger[to](logFields(meta), message);
  };
  return {
    log,
    trace: (message, meta) => log('TRACE', message, meta),
    debug: (message, meta) => log('DEBUG', message, meta),
    info: (message, meta) => log('INFO', message, meta),
    warn: (message, meta) => log('WARN', message, meta),
    error: (message, meta) => log('ERROR', message, meta),
  };
}

/**
 * The SDK's fields as log fields: its `error` is the logger's `err` (serialised with its
 * stack by pino); any other error value is serialised the same way, where JSON would make it
 * `{}`. Errors from workflow code come from the workflow sandbox's realm, so they are
 * recognised by shape, not by `instanceof`. Symbol keys (the SDK's timestamp) are left out.
 */
function logFields(meta: LogMetadata | undefined): Record<string, unknown> {
  if (meta === undefined) return {};
  if (errorLike(meta)) return { err: meta };
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(meta)) {
    if (key === 'error' && !('err' in meta)) out.err = value;
    else out[key] = key !== 'err' && errorLike(value) ? pino.stdSerializers.err(value) : value;
  }
  return out;
}

function errorLike(value: unknown): value is Error {
  return typeof value === 'object' && value !== null && typeof (value as Error).message === 'string' && typeof (value as Error).stack === 'string';
}

let runtimeInstalled = false;

/**
 * Installs the SDK's runtime (once per process, before its first connection) with the
 * service's logger, and with the Rust core's lines forwarded to it rather than printed in the
 * SDK's own format: every line the SDK writes is then one of the service's JSON log lines. The
 * core logs warnings and errors (debug too when LOG_LEVEL is debug or trace). Everything else
 * is the SDK's default (the shutdown signals the worker stops on among them).
 */
export function installTemporalRuntime(logger: Logger): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({
      logger: temporalLogger(logger),
      telemetryOptions: { logging: { filter: { core: logger.isLevelEnabled('debug') ? 'DEBUG' : 'WARN', other: 'ERROR' }, forward: {} } },
    });
  } catch (err) {
    // Something of the SDK already made its default runtime (a replay in a test): it keeps it.
    if (!(err instanceof IllegalStateError)) throw err;
    logger.warn('the Temporal runtime was created before the service installed its logger: the SDK logs in its own format');
  }
}

function withActivityInterceptors<T extends object>(code: T, tracing: WorkerTracing | undefined): T {
  const activity = activityInterceptors(tracing);
  if (!activity || activity.length === 0) return code;
  const existing = (code as { interceptors?: object }).interceptors ?? {};
  return { ...code, interceptors: { ...existing, activity } };
}

/** A Temporal worker for this service's workflows and activities. */
export async function startWorker(opts: {
  deps: CoreDeps;
  address: string;
  namespace: string;
  logger: Logger;
  taskQueue?: string;
  /**
   * On shutdown, how long activities in flight may run on before they are cancelled; a
   * cancelled attempt is retried by Temporal on another worker (every step is idempotent).
   */
  shutdownGraceSeconds?: number;
  /**
   * After this long, a shutdown that is still waiting for work in flight gives up (the SDK's
   * shutdownForceTime): for tests, whose harness must close within its hook's time. Unset (the
   * processes): a shutdown waits for the grace period's cancellations to be honoured.
   */
  shutdownForceSeconds?: number;
  /** Tracing on (config/telemetry.ts): where the workflow and activity spans go (workflows/tracing.ts). */
  tracing?: WorkerTracing | undefined;
  /**
   * A workflow bundle `npm run build` made, for a worker started from the sources (the tests
   * pass the one their setup built): no webpack at start. Unset: the bundle beside this file, or
   * the sources bundled now.
   */
  workflowBundlePath?: string;
  /** Another connection than one to `address` (the tests' time-skipping server). */
  connection?: NativeConnection;
}): Promise<RunningWorker> {
  installTemporalRuntime(opts.logger);
  // The workflow thread without the SDK's per-call watchdog thread and stack-trace hook, watched from here instead (workflows/workflow-thread.ts).
  installWorkflowThreadEntry(opts.logger);
  const own = opts.connection === undefined;
  const connection = opts.connection ?? (await NativeConnection.connect({ address: opts.address }));
  const worker = await Worker.create({
    connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue ?? TASK_QUEUE,
    ...withActivityInterceptors(workflowCode(opts.workflowBundlePath), opts.tracing),
    sinks: workerSinks(opts.tracing),
    activities: createActivities(opts.deps),
    shutdownGraceTime: `${opts.shutdownGraceSeconds ?? 0}s`,
    ...(opts.shutdownForceSeconds !== undefined ? { shutdownForceTime: `${opts.shutdownForceSeconds}s` } : {}),
  });
  const done = worker.run().finally(() => (own ? connection.close() : undefined));
  done.catch((err: unknown) => opts.logger.error({ err }, 'Temporal worker stopped with an error'));
  opts.logger.info({ taskQueue: opts.taskQueue ?? TASK_QUEUE }, 'Temporal worker running');
  return {
    done,
    async shutdown() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await done.catch(() => undefined);
    },
  };
}
