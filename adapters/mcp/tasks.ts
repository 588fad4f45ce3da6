import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CancelTaskRequestSchema,
  ErrorCode,
  GetTaskPayloadRequestSchema,
  GetTaskRequestSchema,
  ListTasksRequestSchema,
  RELATED_TASK_META_KEY,
  type CallToolResult,
  type CreateTaskResult,
  type Task,
} from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { z } from 'zod';
import { publicError, type CoreError } from '../../core/errors.ts';
import type { GenerationView } from '../../core/generations/views.ts';
import { toCoreError } from '../../core/trpc.ts';
import { HTTP_STATUS } from '../http/status.ts';
import { protocolError, toolArguments, TOOLS } from './dispatch.ts';
import { answer, type CoreCaller } from './tool.ts';
import { describe, generate } from './tools/generations.ts';

/**
 * Tasks (MCP revision 2025-11-25) for `generate`, over the v1 SDK's low-level Server.
 *
 * A task IS the job row: its taskId is the job id (`gen_…`), its status is the job's, and every
 * tasks/* request is answered by one core procedure (generations.create, get, wait, list,
 * cancel). Nothing is kept in memory, so a task created on one instance is read on another,
 * and after a restart. This is why the SDK's TaskStore is not used: its store is written by
 * the SDK (createTask, storeTaskResult, updateTaskStatus) for work that runs in the server's
 * process, while here the work is a Temporal workflow that core already records; the handlers
 * below read that record instead.
 */

/** What the server declares: tasks/list, tasks/cancel, and task-augmented tools/call. */
export const TASKS_CAPABILITY = { list: {}, cancel: {}, requests: { tools: { call: {} } } };

/** How often a client should ask tasks/get (media jobs take seconds to minutes). */
export const TASK_POLL_INTERVAL_MS = 5000;
/** tasks/list's page (core's list allows 1 to 100). */
const LIST_PAGE = 50;
/** The most one core wait call may wait (core's MAX_WAIT_SECONDS); tasks/result calls again. */
const WAIT_SLICE_SECONDS = 60;

export interface TaskOptions {
  /** A core caller for one request: one count against the rate limit, aborted with `signal`. */
  core(signal: AbortSignal): CoreCaller;
  logger: Logger;
  /** How long a job's result is kept after it ends (RESULT_RETENTION_SECONDS). */
  resultRetentionSeconds: number;
}

const STATUS: Record<GenerationView['status'], Task['status']> = {
  queued: 'working',
  running: 'working',
  succeeded: 'completed',
  failed: 'failed',
  canceled: 'cancelled',
};

/**
 * The task of a job. `ttl` (milliseconds from creation, as the specification counts it) is how
 * long the result lives: until its link expires for a succeeded job, the retention period after
 * the end for a failed or canceled one, and, while the job runs, at least the retention period
 * from now (it grows until the job ends).
 */
export function taskOf(job: GenerationView, resultRetentionSeconds: number, now = Date.now()): Task {
  const created = Date.parse(job.created_at);
  const ended = job.completed_at === null ? now : Date.parse(job.completed_at);
  const until = job.output ? Date.parse(job.output.expires_at) : ended + resultRetentionSeconds * 1000;
  const status = STATUS[job.status];
  return {
    taskId: job.id,
    status,
    statusMessage: statusMessage(job),
    createdAt: job.created_at,
    lastUpdatedAt: job.completed_at ?? job.started_at ?? job.created_at,
    ttl: Math.max(0, until - created),
    ...(status === 'working' ? { pollInterval: TASK_POLL_INTERVAL_MS } : {}),
  };
}

function statusMessage(job: GenerationView): string {
  switch (job.status) {
    case 'queued':
    case 'running':
      return `Job ${job.id} (${job.model}) is ${job.status}. tasks/result waits for it; its price, ${job.price_coins} coins, is reserved.`;
    case 'succeeded':
      return `Job ${job.id} succeeded. Cost: ${job.cost_coins} coins. tasks/result gives the result link.`;
    case 'failed':
      return `Job ${job.id} failed: ${job.error?.message ?? 'unknown error'}. Its ${job.price_coins} coins were refunded in full.`;
    case 'canceled':
      return `Job ${job.id} was canceled and refunded in full.`;
  }
}

/**
 * The answer to a task-augmented tools/call of `generate`: the job is created as `generate`
 * creates it (same arguments, validation, price reservation and idempotency_key), and its task
 * returned at once. `wait_seconds` is accepted and ignored: a task does not wait. A refused
 * request (a bad argument, no balance, a limit) starts no job and charges nothing: it is a
 * JSON-RPC error (a CreateTaskResult has no room for a tool error), with the REST error object
 * in its `data`.
 */
export async function createGenerateTask(args: Record<string, unknown> | undefined, core: CoreCaller, opts: TaskOptions): Promise<CreateTaskResult> {
  try {
    const { wait_seconds: _ignored, ...request } = toolArguments(generate, args);
    const { generation: job } = await core.generations.create(request);
    return { task: taskOf(job, opts.resultRetentionSeconds) };
  } catch (err) {
    throw asProtocolError(err, opts.logger);
  }
}

/**
 * A task-augmented tools/call. Only a tool that declares `execution.taskSupport` runs as a
 * task (`generate`); for the others the specification says -32601, and an unknown tool is
 * the same invalid-params error as a plain call's.
 */
export async function callToolAsTask(name: string, args: Record<string, unknown> | undefined, core: CoreCaller, opts: TaskOptions): Promise<CreateTaskResult> {
  const tool = TOOLS.find((t) => t.name === name);
  if (!tool) throw protocolError(ErrorCode.InvalidParams, `Unknown tool: ${name}. tools/list names the tools.`);
  if (tool.execution?.taskSupport === undefined || tool.name !== generate.name) {
    throw protocolError(ErrorCode.MethodNotFound, `The tool ${tool.name} cannot run as a task: call it without "task". Only tools whose execution.taskSupport is "optional" can.`);
  }
  return createGenerateTask(args, core, opts);
}

/**
 * A request schema that names only its method. The v1 SDK parses a request with its handler's
 * schema before the handler runs, and answers a parse failure as an internal error (-32603);
 * a handler registered with this schema parses the rest with `parsed`, so a malformed request
 * is invalid params (-32602) saying what is wrong.
 */
export const methodOnly = <M extends string>(method: M) => z.object({ method: z.literal(method) }).loose();

export function parsed<T>(schema: { safeParse(data: unknown): { success: true; data: T } | { success: false; error: z.ZodError } }, request: { method: string }): T {
  const result = schema.safeParse(request);
  if (!result.success) throw protocolError(ErrorCode.InvalidParams, `Invalid ${request.method} request: ${z.prettifyError(result.error).replaceAll('\n', ' ')}`);
  return result.data;
}

/** tasks/get, tasks/result, tasks/list and tasks/cancel on this request's server. */
export function registerTaskHandlers(server: Server, opts: TaskOptions): void {
  server.setRequestHandler(methodOnly('tasks/get'), async (raw, extra) => {
    const request = parsed(GetTaskRequestSchema, raw);
    const job = await own(() => opts.core(extra.signal).generations.get({ id: request.params.taskId }), request.params.taskId, opts.logger);
    return taskOf(job, opts.resultRetentionSeconds);
  });

  // Waits until the job ends (or the client goes away), then answers as `generate` would have.
  server.setRequestHandler(methodOnly('tasks/result'), async (raw, extra) => {
    const request = parsed(GetTaskPayloadRequestSchema, raw);
    const { taskId } = request.params;
    const core = opts.core(extra.signal);
    let job = await own(() => core.generations.get({ id: taskId }), taskId, opts.logger);
    while (STATUS[job.status] === 'working') {
      if (extra.signal.aborted) throw protocolError(ErrorCode.ConnectionClosed, 'The request was cancelled.');
      job = await own(() => core.generations.wait({ id: taskId, seconds: WAIT_SLICE_SECONDS }), taskId, opts.logger);
    }
    return { ...taskResult(job), _meta: { [RELATED_TASK_META_KEY]: { taskId } } };
  });

  // Every media job of the account is a task it can see, whether started as a task, by a
  // waiting generate, or over REST: the account's jobs, newest first.
  server.setRequestHandler(methodOnly('tasks/list'), async (raw, extra) => {
    const request = parsed(ListTasksRequestSchema, raw);
    const cursor = request.params?.cursor;
    const page = await own(() => opts.core(extra.signal).generations.list({ limit: LIST_PAGE, ...(cursor !== undefined ? { starting_after: cursor } : {}) }), cursor ?? '', opts.logger, 'cursor');
    const tasks = page.data.map((job) => taskOf(job, opts.resultRetentionSeconds));
    return { tasks, ...(page.has_more && tasks.length > 0 ? { nextCursor: tasks.at(-1)!.taskId } : {}) };
  });

  // The job's own cancel: it ends canceled and its reserved price is refunded, once.
  server.setRequestHandler(methodOnly('tasks/cancel'), async (raw, extra) => {
    const request = parsed(CancelTaskRequestSchema, raw);
    const job = await own(() => opts.core(extra.signal).generations.cancel({ id: request.params.taskId }), request.params.taskId, opts.logger);
    return taskOf(job, opts.resultRetentionSeconds);
  });
}

/**
 * What tasks/result gives for an ended job: the same content `generate` returns (the job as
 * structured content, its text, the result link), and `isError` when the job failed or was
 * canceled, as the specification's `failed` status for a tool call means.
 */
export function taskResult(job: GenerationView): CallToolResult {
  const shown = describe(job);
  const result = answer({ structured: job, text: shown.text, content: shown.content });
  return job.status === 'succeeded' ? result : { ...result, isError: true };
}

/**
 * Runs a core call about one of the account's tasks. An unknown id, another account's, or a
 * malformed one are the same error (invalid params: the specification's "task not found"),
 * so a task's existence never leaks; ending an ended task is invalid params too.
 */
async function own<T>(run: () => Promise<T>, id: string, logger: Logger, what: 'task' | 'cursor' = 'task'): Promise<T> {
  try {
    return await run();
  } catch (err) {
    const core = toCoreError(err);
    const shown = id.length > 80 ? `${id.slice(0, 80)}…` : id;
    if (core?.code === 'not_found' || (core?.code === 'invalid_request' && (core.param === 'id' || core.param === 'starting_after'))) {
      throw protocolError(ErrorCode.InvalidParams, what === 'task' ? `Task not found: ${shown}. tasks/list names this account's tasks.` : `Invalid cursor: ${shown}. Use the nextCursor of tasks/list.`);
    }
    if (core?.code === 'conflict') throw protocolError(ErrorCode.InvalidParams, `Cannot cancel task ${shown}: ${core.message}`);
    throw asProtocolError(err, logger);
  }
}

/**
 * A JSON-RPC error for a refused request: invalid params for a bad argument, else a server
 * error (-32000); either way its message is core's and its `data` the REST error object with
 * the HTTP status REST would answer. An unexpected fault is logged and stays vague.
 */
function asProtocolError(err: unknown, logger: Logger): Error {
  const core = toCoreError(err);
  if (!core) {
    logger.error({ err }, 'MCP task request failed');
    return protocolError(ErrorCode.InternalError, 'Internal error. The request id is in the x-request-id header.');
  }
  return Object.assign(protocolError(core.code === 'invalid_request' ? ErrorCode.InvalidParams : SERVER_ERROR, messageOf(core)), { data: { error: publicError(core), status: HTTP_STATUS[core.code] } });
}

/** JSON-RPC's implementation-defined server error. */
const SERVER_ERROR = -32000 as ErrorCode;

function messageOf(err: CoreError): string {
  const retry = err.retryAfterSeconds !== undefined && !err.message.includes('Retry in') ? ` Retry in ${Math.max(1, Math.ceil(err.retryAfterSeconds))} s.` : '';
  return `${err.message}${retry}`;
}
