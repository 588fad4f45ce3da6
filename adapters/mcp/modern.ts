import { createMcpHandler, Server, type McpHttpHandler, type Tool } from '@modelcontextprotocol/server';
import { callTool, DEFINITIONS, INSTRUCTIONS, listResources, readResource, SERVER_INFO } from './dispatch.ts';
import type { McpServerOptions } from './server.ts';

/** The protocol revision this binding serves; the 2025 revisions stay on the v1 binding (server.ts). */
export const MODERN_PROTOCOL_VERSION = '2026-07-28';

const OUTPUT_SCHEMAS = new Map(DEFINITIONS.map((d) => [d.name, d.outputSchema as Record<string, unknown> | undefined]));

/**
 * The tools as 2026-07-28 lists them: `execution.taskSupport` is 2025-11-25 vocabulary that the
 * v2 SDK's codec refuses on this revision (tasks are served on the 2025 revisions only: tasks.ts).
 */
const MODERN_DEFINITIONS = DEFINITIONS.map(({ execution: _tasks, ...tool }) => tool) as Tool[];

/**
 * An MCP server for one request over the v2 SDK (`@modelcontextprotocol/server`), for the
 * 2026-07-28 revision: `server/discover` (answered by the SDK from the capabilities and the
 * instructions given here), tools/list and tools/call over the same tools as the v1 binding
 * (dispatch.ts), with progress notifications when the call's `_meta` carries a progress token.
 * The MCP Apps views (`ui://`) are resources here as on the v1 binding. No prompts, logging or
 * subscriptions are declared.
 */
export function createModernServer(opts: McpServerOptions): Server {
  const server = new Server({ ...SERVER_INFO, version: opts.version }, { capabilities: { tools: {}, resources: {} }, instructions: INSTRUCTIONS });
  // The same JSON Schemas as the v1 binding's tools/list; the two SDKs' Tool types differ only in their optional extras.
  server.setRequestHandler('tools/list', () => ({ tools: MODERN_DEFINITIONS }));
  server.setRequestHandler('resources/list', () => listResources(opts.publicBaseUrl));
  server.setRequestHandler('resources/read', (request) => readResource(request.params.uri, opts.publicBaseUrl));
  server.setRequestHandler('tools/call', async (request, ctx) => {
    const token = ctx.mcpReq._meta?.progressToken;
    const progress = async (message: string, done: number, total?: number) => {
      if (token === undefined) return;
      // A client that went away cannot be told: the call goes on (its job is billed as in REST).
      await ctx.mcpReq
        .notify({ method: 'notifications/progress', params: { progressToken: token, progress: done, ...(total !== undefined ? { total } : {}), message } })
        .catch(() => undefined);
    };
    const result = await callTool(request.params.name, request.params.arguments, {
      core: opts.core,
      signal: ctx.mcpReq.signal,
      progress,
      logger: opts.logger,
      generateWaitSeconds: token === undefined ? Math.min(opts.generateWaitSeconds, opts.generateQuietWaitSeconds) : opts.generateWaitSeconds,
      maxWaitSeconds: opts.generateWaitSeconds,
      progressEverySeconds: opts.progressEverySeconds,
    });
    // The SDK's one projection of a tool result for the served revision (its text fallback rules).
    return server.projectCallToolResult(result as Parameters<Server['projectCallToolResult']>[0], OUTPUT_SCHEMAS.get(request.params.name));
  });
  return server;
}

/**
 * The v2 SDK's HTTP entry for the 2026-07-28 revision only (`legacy: 'reject'`): mcp.ts routes
 * 2025-era requests to the v1 binding before they reach it (`isLegacyRequest`). One handler
 * serves every request; each request's server is made by `serverFor`, from what the door
 * (mcp.ts) checked for that request. Answers always stream as server-sent events, as the v1
 * binding's do, so that progress can flow and keep-alive comments hold a long `generate` open.
 */
export function createModernHandler(serverFor: (request: Request | undefined) => Server, maxRequestBodySize: number): McpHttpHandler {
  return createMcpHandler(({ requestInfo }) => serverFor(requestInfo), { legacy: 'reject', responseMode: 'sse', maxRequestBodySize });
}
