import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ListResourcesRequestSchema, ListToolsRequestSchema, ReadResourceRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { callTool, DEFINITIONS, INSTRUCTIONS, listResources, readResource, SERVER_INFO } from './dispatch.ts';
import { callToolAsTask, methodOnly, parsed, registerTaskHandlers, TASKS_CAPABILITY } from './tasks.ts';
import type { CoreCaller } from './tool.ts';

export { TOOLS } from './dispatch.ts';

/** What one HTTP request's server needs: a core caller per tool call, and the transport's limits. */
export interface McpServerOptions {
  /** A core caller for one tool call: its own rate-limit count, aborted with `signal`. */
  core(signal: AbortSignal): CoreCaller;
  logger: Logger;
  version: string;
  generateWaitSeconds: number;
  /** How long `generate` waits when the call carries no progressToken (mcp.ts). */
  generateQuietWaitSeconds: number;
  /** How often `generate` sends progress while it waits (mcp.ts). */
  progressEverySeconds: number;
  /** How long a job's result is kept (RESULT_RETENTION_SECONDS): a task's ttl (tasks.ts). */
  resultRetentionSeconds: number;
  /** PUBLIC_BASE_URL: the one origin the MCP Apps views' CSP allows (their result links). */
  publicBaseUrl: string;
}

/**
 * An MCP server for one request (the transport is stateless) over `@modelcontextprotocol/sdk`
 * v1, for the 2025 revisions: tools/list and tools/call over the tools of dispatch.ts, and
 * 2025-11-25's tasks for `generate`, each task being its job row (tasks.ts), and
 * resources/list and resources/read over its MCP Apps views (`ui://`).
 */
export function createMcpServer(opts: McpServerOptions): Server {
  const server = new Server({ ...SERVER_INFO, version: opts.version }, { capabilities: { tools: {}, resources: {}, tasks: TASKS_CAPABILITY }, instructions: INSTRUCTIONS });
  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: DEFINITIONS }));
  server.setRequestHandler(ListResourcesRequestSchema, () => listResources(opts.publicBaseUrl));
  server.setRequestHandler(ReadResourceRequestSchema, (request) => readResource(request.params.uri, opts.publicBaseUrl));
  registerTaskHandlers(server, opts);
  // The SDK's tools/call wrapper checks the request (invalid params when malformed: tasks.ts, methodOnly).
  server.setRequestHandler(methodOnly('tools/call'), async (raw, extra) => {
    const request = parsed(CallToolRequestSchema, raw);
    if (request.params.task) return callToolAsTask(request.params.name, request.params.arguments, opts.core(extra.signal), opts);
    const token = extra._meta?.progressToken;
    const progress = async (message: string, done: number, total?: number) => {
      if (token === undefined) return;
      // A client that went away cannot be told: the call goes on (its job is billed as in REST).
      await extra
        .sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: done, ...(total !== undefined ? { total } : {}), message } })
        .catch(() => undefined);
    };
    return callTool(request.params.name, request.params.arguments, {
      core: opts.core,
      signal: extra.signal,
      progress,
      logger: opts.logger,
      generateWaitSeconds: token === undefined ? Math.min(opts.generateWaitSeconds, opts.generateQuietWaitSeconds) : opts.generateWaitSeconds,
      maxWaitSeconds: opts.generateWaitSeconds,
      progressEverySeconds: opts.progressEverySeconds,
    });
  });
  return server;
}
